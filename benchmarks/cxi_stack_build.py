#!/usr/bin/env python3
"""What the image's own Slingshot stack costs: a cold build of an image with the cxi_stack
section, step by step, and what it adds to the image.

    .venv/bin/python benchmarks/cxi_stack_build.py

The recipe is the one tests/components/cxi_stack/test_cxi_stack_build.py builds
(testbed/plugin_recipe.py ``cxi_stack_recipe``): Debian sid with experimental's ROCm 7.2.4,
rocm-7.2.4's network plugin (aws-ofi-nccl v1.21.1) on HPE's CXI user space at
release/shs-13.1.0 and libfabric 2.6.0 with cxi, the sources served from
../shared/fixtures/sources by the testbed's mirror. Built with ``--no-cache`` (every step
runs; the base image and BuildKit's apt cache mount stay). The seconds of each step come
from BuildKit's log ("#N DONE 12.3s"); the sizes from the image.

Needs root (dockerd), the registry on 127.0.0.1:5000 (scripts/setup-test-env). Writes its
record (bench_record.py) to benchmarks/results/cxi-stack/build.json and .txt; commit them:
docs/runtimes.md quotes them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_record import RESULTS, Recording

from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.select import open_engine
from imagebuild.images import latest_tag
from testbed import base_images
from testbed.cli import run_imagebuild
from testbed.plugin_recipe import SID_ROCM_7_2_4, cxi_stack_recipe, placeholder_torch
from testbed.source_mirror import SourceMirror
from testbed.wheel_index import IndexServer

NAME = "cxi-stack-bench"
DOCKER = "/usr/bin/docker"
_STEP = re.compile(r"^#(\d+) \[([a-z0-9-]+) +(\d+)/(\d+)\] (.*)$")
_DONE = re.compile(r"^#(\d+) DONE ([0-9.]+)s$")


def imagebuild(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_imagebuild(project, *argv, timeout=3600)


def step_seconds(log: str) -> list[dict[str, object]]:
    """(stage, step, command, seconds) of every step BuildKit ran, in order."""
    steps: dict[str, dict[str, object]] = {}
    for line in log.splitlines():
        if match := _STEP.match(line):
            steps.setdefault(match.group(1), {"stage": match.group(2),
                                              "step": f"{match.group(3)}/{match.group(4)}",
                                              "command": match.group(5)[:90]})
        elif (match := _DONE.match(line)) and match.group(1) in steps:
            steps[match.group(1)]["seconds"] = float(match.group(2))
    return [step for step in steps.values() if "seconds" in step]


def summary(data: dict) -> str:
    """The sentence docs/runtimes.md quotes, from a record's figures."""
    stages = data["stage_step_seconds"]
    return (f"a cold build of the test image (--no-cache, base image present) took "
            f"{data['build_seconds']:.0f} s, of which the cxi-stack stage's steps "
            f"{stages.get('cxi-stack', 0.0):.0f} s; /opt/cxi-stack adds "
            f"{data['cxi_stack_kib'] / 1024:.1f} MiB to the image")


def in_image(image: str, *argv: str) -> str:
    return subprocess.run([DOCKER, "run", "--rm", image, *argv], capture_output=True,
                          text=True, check=True).stdout


def main() -> int:
    path = RESULTS / "cxi-stack" / "build"
    with Recording(path, "cxi_stack_build", tools=("docker", "git")) as record, \
            tempfile.TemporaryDirectory(prefix="cxi-stack-bench-") as work:
        root = Path(work)
        (root / "recipes").mkdir()
        engine = open_engine("docker")
        assert isinstance(engine, DockerEngine)
        base_images.import_base_image_docker(engine, SID_ROCM_7_2_4.base)
        base = base_images.push_base_image(engine, SID_ROCM_7_2_4.base)
        placeholder_torch(root / "index" / "whl")
        with IndexServer(root / "index") as index, SourceMirror(root / "mirror") as mirror:
            (root / "recipes" / f"{NAME}.yaml").write_text(
                cxi_stack_recipe(base, index.url_for("whl/")))
            locked = imagebuild(root, "lock", NAME,
                                *(f"--git-mirror={a}={b}" for a, b in mirror.mirrors.items()))
            if locked.returncode != 0:
                print(locked.stderr, file=sys.stderr)
                return 1
            started = time.monotonic()
            built = imagebuild(root, "build", NAME, "--no-cache")
            seconds = time.monotonic() - started
        log = (root / "artifacts" / NAME / "build.log").read_text()
        if built.returncode != 0:
            print(built.stderr[-3000:], file=sys.stderr)
            return 1
        steps = step_seconds(log)
        by_stage: dict[str, float] = {}
        for step in steps:
            stage = str(step["stage"])
            by_stage[stage] = by_stage.get(stage, 0.0) + float(step["seconds"])  # type: ignore[arg-type]
        image = latest_tag(NAME)
        stack_kib = int(in_image(image, "du", "-sk", "/opt/cxi-stack").split()[0])
        plugin_kib = int(in_image(image, "du", "-sk", "/opt/aws-ofi-nccl").split()[0])
        image_bytes = json.loads(subprocess.run([DOCKER, "image", "inspect", image],
                                                capture_output=True, text=True,
                                                check=True).stdout)[0]["Size"]
        print(f"cold build of {NAME} (--no-cache, base present): {seconds:.0f} s")
        for stage in ("toolchain", "cxi-stack", "plugin", "final"):
            print(f"  stage {stage:10s} {by_stage.get(stage, 0.0):6.1f} s of steps")
        for step in steps:
            if step["stage"] == "cxi-stack":
                print(f"    cxi-stack {step['step']:5s} {float(step['seconds']):6.1f} s  "  # type: ignore[arg-type]
                      f"{step['command']}")
        print(f"/opt/cxi-stack in the image: {stack_kib / 1024:.1f} MiB; the plugin: "
              f"{plugin_kib / 1024:.1f} MiB; image {image_bytes / 1e6:.0f} MB")
        record.data.update({
            "recipe": "testbed cxi_stack_recipe (sid + ROCm 7.2.4, aws-ofi-nccl v1.21.1, "
                      "shs-13.1.0, libfabric 2.6.0)",
            "build_seconds": round(seconds, 1), "stage_step_seconds": by_stage,
            "steps": steps, "cxi_stack_kib": stack_kib, "plugin_kib": plugin_kib,
            "image_bytes": image_bytes})
        print(summary(record.data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
