#!/usr/bin/env python3
"""Rebuild time on a CI runner that never built the image, with and without the registry
cache per stage.

    .venv/bin/python benchmarks/registry_cache.py

The runner is a Docker daemon of this script's own (testbed/private_docker.py: Debian
trixie's dockerd 26.1 with the containerd image store, buildx 0.13; .ci/setup-system.sh
unpacks them), emptied before every build; the cache lives in a fresh repository of the
loopback registry (127.0.0.1:5000). The recipe is the CPU test recipe with Megatron-LM
from the Swiss AI fixture bundle (torch 2.13.0+cpu, 24 wheels). One line per build:

  cold           no cache, Megatron-LM at main
  seed           the same, exporting each stage to the cache (what the default branch does)
  same-cached    nothing changed, --cache-from
  pin-cold       Megatron-LM pinned to main's parent (re-locked), no cache
  pin-cached     the same, --cache-from (the entries the seed build exported)

Needs root (dockerd), the registry on 127.0.0.1:5000 and the base image there (the tests'
fixtures push it; so does scripts/demo). Every run writes its record (bench_record.py:
figures, machine, tools, command) to benchmarks/results/registry-cache/rebuild.json and
.txt; commit them: docs/ci.md quotes them.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_record import RESULTS, Recording

from imagebuild.cli import main
from testbed.base_images import REGISTRY, REGISTRY_BASE_IMAGE
from testbed.cpu_recipe import MEGATRON_PARENT, MEGATRON_SECTION, torch_wheel, write_recipe
from testbed.private_docker import PrivateDocker, binaries_root
from testbed.source_mirror import SourceMirror
from testbed.wheel_index import IndexServer

NAME = "cpu-cache-bench"
#: Where a run's record goes: committed, so the docs' figures trace to it.
RECORD = RESULTS / "registry-cache" / "rebuild"


def build(*flags: str) -> tuple[float, dict]:
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = main(["build", NAME, "--json", *flags])
    seconds = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"build {' '.join(flags)} failed (exit {code})")
    return seconds, json.loads(out.getvalue())


def step_totals(result: dict) -> dict[str, int]:
    return {source: sum(len(row[source]) for row in result["stages"].values())
            for source in ("imported", "cached", "built")}


def main_() -> None:
    with Recording(RECORD, "registry_cache", tools=("docker", "git")) as record:
        record.data["builds"] = []
        measure_all(record.data["builds"])


def measure_all(builds: list[dict]) -> None:
    cache = f"{REGISTRY}/imagebuild-bench/stage-cache-{uuid.uuid4().hex[:12]}"
    versions = (binaries_root() / "VERSIONS").read_text().split("\n")
    print(f"machine: {os.cpu_count()} CPUs, "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
          f"{platform.platform()}")
    print(f"runner: {', '.join(v for v in versions if v)} (containerd image store), emptied "
          f"before each build; cache: {cache} (loopback registry)")
    print(f"recipe: CPU test recipe + Megatron-LM (Swiss AI bundle), {torch_wheel().name}")
    with tempfile.TemporaryDirectory(prefix="imagebuild-bench-") as tmp:
        work = Path(tmp)
        index = work / "index"
        index.mkdir()
        (index / torch_wheel().name).symlink_to(torch_wheel())
        project = work / "project"
        recipe = write_recipe(project, NAME, REGISTRY_BASE_IMAGE)
        base_recipe = recipe.read_text()
        saved = dict(os.environ)
        with PrivateDocker(work / "runner") as runner, SourceMirror(work / "mirror") as mirror, \
                IndexServer(index) as served:
            os.environ.update(runner.env, IMAGEBUILD_PROJECT=str(project),
                              IMAGEBUILD_CACHE=str(work / "downloads"),
                              IMAGEBUILD_BACKEND="docker")
            if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
                os.environ["IMAGEBUILD_SITE_CA"] = "/etc/ssl/certs/ca-certificates.crt"
            mirrors = [f"--git-mirror={s}={t}" for s, t in mirror.mirrors.items()]

            def lock(ref: str) -> None:
                recipe.write_text(base_recipe + MEGATRON_SECTION.format(ref=ref))
                with contextlib.redirect_stdout(io.StringIO()):
                    assert main(["lock", NAME, "--index-url", served.url, *mirrors]) == 0

            def measure(label: str, *flags: str) -> None:
                runner.fresh()
                seconds, result = build(*flags)
                totals = step_totals(result)
                builds.append({"build": label, "flags": list(flags),
                               "seconds": round(seconds, 1), "steps": totals,
                               "stages": result["stages"]})
                print(f"{label:<12} {seconds:7.1f} s   {' '.join(flags) or '(no cache)':<70} "
                      f"steps: {', '.join(f'{n} {s}' for s, n in totals.items())}",
                      flush=True)

            try:
                lock("main")
                measure("cold")
                measure("seed", "--cache-to", cache)
                measure("same-cached", "--cache-from", cache)
                lock(MEGATRON_PARENT)
                measure("pin-cold")
                measure("pin-cached", "--cache-from", cache)
            finally:
                os.environ.clear()
                os.environ.update(saved)


if __name__ == "__main__":
    main_()
