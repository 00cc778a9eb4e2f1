"""ROCm from wheels, end to end on a real Docker engine: a recipe with rocm_from: wheels is
locked against a local PEP 503 index shaped like TheRock's (testbed.therock_index.py: the
rocm selector sdist, rocm-sdk-core and rocm-sdk-libraries-<family> wheels with real
METADATA, published sha256 and gcc-built stand-ins of libamdhip64 and librccl), built on a
plain Debian base with no ROCm, and the image is asked what it holds.

What only a cluster shows: the real SDK wheels' layout and device code, and a GPU."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from imagebuild.cli import main
from imagebuild.images import latest_tag
from imagebuild.lock.lockfile import read_lock
from imagebuild.render.layout import VENV
from testbed.therock_index import RocmSdkIndex, make_rocm_sdk_index
from tests.support.engine_env import imagebuild_env
from tests.support.indexserver import IndexServer

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "therock-e2e"
IMAGE = latest_tag(NAME)
FAMILY = "gfx94X-dcgpu"
RECIPE = """\
version: 1
description: ROCm from TheRock-shaped wheels on a plain Debian base
rocm: {version}
rocm_from: wheels
base_image: {base_image}
python: "3.11"
wheels:
  index_url: {index}{{family}}/
  packages:
    torch: {torch}
gpu_targets: [gfx942]
dockerfile:
  syntax: null
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str,
          docker_engine) -> Iterator[dict]:
    sdk: RocmSdkIndex = make_rocm_sdk_index(tmp_path_factory.mktemp("therock"),
                                            python_tag="cp311")
    project = tmp_path_factory.mktemp("project")
    (project / "recipes").mkdir()
    with IndexServer(sdk.root, publish_hashes=True) as server, \
            imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        (project / "recipes" / f"{NAME}.yaml").write_text(RECIPE.format(
            version=sdk.version, base_image=registry_base_image, index=server.url,
            torch=sdk.torch_version))
        assert main(["lock", NAME]) == 0
        assert main(["build", NAME, "--squash", "sqsh"]) == 0
        yield {"sdk": sdk, "lock": read_lock(project / "recipes" / f"pylock.{NAME}.toml"),
               "project": project}


def run(*command: str) -> str:
    result = subprocess.run(["/usr/bin/docker", "run", "--rm", "--network", "none", IMAGE,
                             *command], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_base_has_no_rocm_and_the_venv_has_the_sdk(built: dict) -> None:
    assert run("sh", "-c", "test ! -e /opt/rocm && echo none").strip() == "none"
    listed = run(f"{VENV}/bin/python", "-c",
                 "import importlib.metadata as m; print(' '.join(sorted("
                 "d.metadata['Name'].lower() for d in m.distributions())))").split()
    assert {"rocm", "rocm-sdk-core", "rocm-sdk-libraries-gfx94x-dcgpu", "torch"} <= set(listed)
    assert not any(name.startswith("rocm-sdk-libraries-gfx950") for name in listed)


def test_the_selector_was_built_for_the_locked_family(built: dict) -> None:
    requires = run(f"{VENV}/bin/python", "-c",
                   "import importlib.metadata as m; print('\\n'.join(m.requires('rocm')))")
    assert "rocm-sdk-libraries-gfx94x-dcgpu==" in requires.lower()
    assert "gfx950" not in requires
    assert run("rocm-sdk", "version").strip() == built["sdk"].version


def test_torch_preloads_the_sdk_libraries(built: dict) -> None:
    maps = run("python", "-c", "import torch; print(open('/proc/self/maps').read())")
    assert f"{VENV}/lib/python3.11/site-packages/_rocm_sdk_core/lib/libamdhip64.so" in maps
    assert "librccl.so" in maps


def test_other_programs_find_hip_and_rccl_by_name(built: dict) -> None:
    """What the RCCL net plugin and ROCm tools rely on: the loader cache, without torch."""
    cache = run("ldconfig", "-p")
    for library in ("libamdhip64.so", "librccl.so"):
        lines = [line for line in cache.splitlines() if library in line]
        assert lines and all(f"{VENV}/lib/python3.11/site-packages/" in line for line in lines)
    run("python", "-c", "import ctypes; ctypes.CDLL('librccl.so.1', mode=ctypes.RTLD_GLOBAL)")


def test_the_manifest_names_the_family_and_the_selector(built: dict) -> None:
    manifest = json.loads(run("cat", "/opt/imagebuild/manifest.json"))
    assert manifest["rocm_from"] == "wheels"
    assert manifest["rocm_wheels"]["gpu_family"] == FAMILY
    assert manifest["rocm_wheels"]["selector"]["sha256"] == built["lock"].selector.sha256


def test_the_sbom_lists_the_sdk_wheels_and_the_selector_sdist(built: dict) -> None:
    bom = json.loads((built["project"] / "artifacts" / f"{NAME}.cdx.json").read_text())
    listed = {c["name"]: (c["hashes"][0]["content"], c["externalReferences"][0]["url"])
              for c in bom["components"] if c["purl"].startswith("pkg:pypi/")}
    lock = built["lock"]
    assert listed == {w.name: (w.sha256, w.url) for w in (*lock.wheels, lock.selector)}
    assert "rocm-sdk-libraries-gfx94x-dcgpu" in listed and "rocm" in listed
