"""RCCL pinned apart from the base image, its stage built for real and loaded by every
consumer.

A recipe on sid with experimental's ROCm 7.2.4 (whose librccl1 7.2.4 stands in for the base
image's RCCL) pins RCCL with ``rccl: {repository, ref}`` and carries the shipped recipes'
rccl-tests, built for gfx942 against the base image's RCCL as always. The pinned repository is
a tree with RCCL's build interface (testbed/rccl_source.py: CMake with hipcc, GPU_TARGETS,
lib/librccl.so.1; one kernel and an ncclGetVersion of its own, 2.99.0) served by the fixture
mirror; ``imagebuild lock`` pins its commit and ``imagebuild build`` builds the image. Proven:

- the rccl stage compiled it with the image's hipcc for the recipe's target into /opt/rccl
  (device code for gfx942 only, read from its offload bundle);
- the final stage's check passed: every consumer (rccl-tests' benchmarks) resolves
  librccl.so.1 to /opt/rccl/lib, recorded in the manifest with the locked commit;
- in the image, loading librccl.so.1 by name (as torch and the benchmarks do) gets the pinned
  library: its ncclGetVersion answers 29900, not the base image's 22707.

Not shown here: RCCL's own sources (hours of hipcc: a job for a big runner) and a GPU run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from imagebuild.components.rccl import component as rccl
from imagebuild.images import latest_tag
from imagebuild.render.layout import SCRIPTS as SCRIPTS_DIR
from testbed import base_images
from testbed.cli import run_imagebuild
from testbed.plugin_recipe import SID_ROCM_7_2_4, placeholder_torch, plugin_recipe
from testbed.rccl_source import (
    STANDIN_REF,
    STANDIN_REPOSITORY,
    STANDIN_VERSION_CODE,
    serve_rccl_source,
)
from testbed.source_mirror import SourceMirror
from tests.support.indexserver import IndexServer

sys.path.insert(0, str(SCRIPTS_DIR))
import buildtime  # the build-time scripts' shared reader

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

DOCKER = "/usr/bin/docker"
NAME = "rccl-pinned-724"
#: librccl1 7.2.4's ncclGetVersion (RCCL 2.27.7).
BASE_VERSION_CODE = 22707


def imagebuild(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_imagebuild(project, *argv, timeout=2400)


def run(image: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, "run", "--rm", image, *argv], capture_output=True,
                          text=True, check=False, timeout=300)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, docker_engine, local_registry: str
          ) -> dict:
    base_images.import_base_image_docker(docker_engine, SID_ROCM_7_2_4.base)
    base = base_images.push_base_image(docker_engine, SID_ROCM_7_2_4.base)
    root = tmp_path_factory.mktemp("rccl-project")
    (root / "recipes").mkdir()
    placeholder_torch(root / "index" / "whl")
    with IndexServer(root / "index") as index, SourceMirror(root / "mirror") as mirror:
        commit = serve_rccl_source(mirror.workdir / "git", root / "work")
        data = yaml.safe_load(plugin_recipe("rocm-7.2.4", SID_ROCM_7_2_4, base,
                                            index.url_for("whl/"), sites=(),
                                            rccl_tests=("gfx942",), network_plugin=False))
        data["description"] = "RCCL pinned apart from the base image RCCL (test)"
        data["rccl"] = {"enabled": True, "repository": STANDIN_REPOSITORY, "ref": STANDIN_REF}
        (root / "recipes" / f"{NAME}.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        locked = imagebuild(root, "lock", NAME,
                            *(f"--git-mirror={a}={b}" for a, b in mirror.mirrors.items()))
        assert locked.returncode == 0, locked.stderr[-3000:]
        started = time.monotonic()
        build = imagebuild(root, "build", NAME)
        seconds = time.monotonic() - started
    print(f"\n[rccl] {NAME}: build {seconds:.0f} s\n{build.stdout[-1500:]}")
    assert build.returncode == 0, (build.stdout[-3000:], build.stderr[-3000:])
    return {"root": root, "image": latest_tag(NAME), "commit": commit}


def test_every_consumer_resolves_the_pinned_rccl(built: dict) -> None:
    manifest = json.loads(run(built["image"], "cat", "/opt/imagebuild/manifest.json").stdout)
    pinned = manifest["rccl"]
    assert pinned["commit"] == built["commit"] and pinned["ref"] == STANDIN_REF
    library = f"{rccl.PREFIX}/lib/librccl.so.1"
    assert pinned["library"] == library
    consumers = pinned["consumers"]
    benchmarks = {path: resolved for path, resolved in consumers.items()
                  if path.startswith("/opt/rccl-tests/")}
    assert any(path.endswith("/all_reduce_perf") for path in benchmarks), consumers
    # The file the pinned library's name leads to (recorded as resolved by the check).
    assert pinned["resolved"].startswith(f"{rccl.PREFIX}/lib/librccl.so.1")
    assert set(benchmarks.values()) == {pinned["resolved"]}, benchmarks
    ldd = run(built["image"], "ldd", next(p for p in benchmarks if p.endswith("all_reduce_perf")))
    assert f"librccl.so.1 => {library}" in ldd.stdout, ldd.stdout


def test_loading_rccl_by_name_gets_the_pinned_one(built: dict) -> None:
    code = ("import ctypes\nlib = ctypes.CDLL('librccl.so.1')\nv = ctypes.c_int()\n"
            "lib.ncclGetVersion(ctypes.byref(v))\nprint(v.value)")
    answered = run(built["image"], "python3", "-c", code)
    assert answered.returncode == 0, answered.stderr
    assert int(answered.stdout) == STANDIN_VERSION_CODE != BASE_VERSION_CODE


def test_the_stage_built_device_code_for_the_recipe_s_target_only(built: dict,
                                                                   tmp_path: Path) -> None:
    container = subprocess.run([DOCKER, "create", built["image"]], capture_output=True,
                               text=True, check=True).stdout.strip()
    try:
        subprocess.run([DOCKER, "cp", f"{container}:{rccl.PREFIX}/lib/librccl.so.1.0",
                        str(tmp_path / "librccl.so")], check=True, capture_output=True)
    finally:
        subprocess.run([DOCKER, "rm", container], capture_output=True, check=False)
    assert buildtime.device_targets(str(tmp_path / "librccl.so")) == {"gfx942"}
