"""ROCm from a multi-arch index, end to end on a real Docker engine: a 10.1 recipe for
gfx942 is locked against a local index shaped like AMD's whl-next
(testbed.therock_index.make_multi_arch_index: torch with device-gfx90a/-gfx942/-gfx950
extras, one device pack per target for torch and the SDK, the selector sdist, published
sha256, gcc-built stand-ins of libamdhip64, librccl and libhipblaslt), built on a plain
Debian base with no ROCm, and the image is asked what it holds: the device code of its
target, and no other.

What only a cluster shows: the real packs' layout and a GPU running their kernels."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from imagebuild.cli import main
from imagebuild.images import latest_tag
from imagebuild.lock.lockfile import read_lock
from imagebuild.render.layout import VENV
from testbed.therock_index import MultiArchIndex, make_multi_arch_index
from tests.support.engine_env import imagebuild_env
from tests.support.indexserver import IndexServer

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "multi-arch-e2e"
IMAGE = latest_tag(NAME)
SITE = f"{VENV}/lib/python3.11/site-packages"
RECIPE = """\
version: 1
description: ROCm 10.1 from a multi-arch-shaped index on a plain Debian base
rocm: {version}
rocm_from: wheels
base_image: {base_image}
python: "3.11"
wheels:
  index_url: {index}
  packages:
    torch: {torch}
gpu_targets: [gfx942]
dockerfile:
  syntax: null
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str,
          docker_engine) -> Iterator[dict]:
    sdk: MultiArchIndex = make_multi_arch_index(tmp_path_factory.mktemp("whl-next"),
                                                python_tag="cp311")
    project = tmp_path_factory.mktemp("project")
    (project / "recipes").mkdir()
    with IndexServer(sdk.root, publish_hashes=True) as server, \
            imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        (project / "recipes" / f"{NAME}.yaml").write_text(RECIPE.format(
            version=sdk.version, base_image=registry_base_image,
            index=server.url_for(f"{sdk.name}/"), torch=sdk.torch_version))
        assert main(["lock", NAME]) == 0
        assert main(["build", NAME]) == 0
        yield {"sdk": sdk, "lock": read_lock(project / "recipes" / f"pylock.{NAME}.toml")}


def run(*command: str) -> str:
    result = subprocess.run(["/usr/bin/docker", "run", "--rm", "--network", "none", IMAGE,
                             *command], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_image_holds_the_device_packs_of_its_target_only(built: dict) -> None:
    listed = set(run(f"{VENV}/bin/python", "-c",
                     "import importlib.metadata as m; print(' '.join(sorted("
                     "d.metadata['Name'].lower() for d in m.distributions())))").split())
    assert {"rocm", "rocm-sdk-core", "rocm-sdk-libraries", "rocm-sdk-device-gfx942",
            "amd-torch-device-gfx942", "torch"} <= listed
    assert not {name for name in listed if "gfx950" in name or "gfx90a" in name}
    files = run("find", f"{SITE}/_rocm_sdk_libraries", f"{SITE}/torch", "-type", "f")
    assert f"{SITE}/_rocm_sdk_libraries/lib/rocblas/library/TensileLibrary_lazy_gfx942.dat" \
        in files.split()
    assert f"{SITE}/torch/.kpack/torch_gfx942.kpack" in files.split()
    assert "gfx950" not in files and "gfx90a" not in files
    assert built["lock"].device_extras == ("device-gfx942",)


def test_the_selector_was_built_with_the_device_extras(built: dict) -> None:
    requires = run(f"{VENV}/bin/python", "-c",
                   "import importlib.metadata as m; print('\\n'.join(m.requires('rocm')))")
    assert 'rocm-sdk-device-gfx942==10.1.0; extra == "device-gfx942"' in requires
    assert run("rocm-sdk", "targets").strip() == "gfx942"
    assert run("rocm-sdk", "version").strip() == built["sdk"].version


def test_torch_preloads_the_host_libraries_of_the_sdk(built: dict) -> None:
    maps = run("python", "-c", "import torch; print(open('/proc/self/maps').read())")
    assert f"{SITE}/_rocm_sdk_core/lib/libamdhip64.so" in maps
    assert f"{SITE}/_rocm_sdk_libraries/lib/librccl.so" in maps
    cache = run("ldconfig", "-p")
    assert f"{SITE}/_rocm_sdk_libraries/lib/librccl.so.1" in cache
