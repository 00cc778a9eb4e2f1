"""Locking a recipe of the 7.14/10.x lines against a local index shaped like TheRock's
multi-arch index (testbed.therock_index.make_multi_arch_index: one PEP 503 index for every
GPU, torch's ``device-<target>`` extras in its METADATA, the selector sdist's device extras
computed by its own backend, published sha256 on every link): uv resolves
``torch[device-<gfx>]`` for the recipe's targets only, and the lock says which extras."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.lock.options import LockOptions
from imagebuild.lock.resolve import lock_recipe
from imagebuild.recipe.load import load_recipe
from testbed.therock_index import MultiArchIndex, make_multi_arch_index
from tests.support.indexserver import IndexServer, sha256_of

pytestmark = pytest.mark.integration

DIGEST = "sha256:" + "cd" * 32
RECIPE = """\
version: 1
rocm: {version}
rocm_from: wheels
base_image: 127.0.0.1:5000/imagebuild-test/debian:bookworm@{digest}
python: "3.12"
wheels:
  index_url: {index}
  packages:
    torch: {torch}
gpu_targets: [{targets}]
{extra}"""


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> MultiArchIndex:
    return make_multi_arch_index(tmp_path_factory.mktemp("multi-arch"))


@pytest.fixture
def served(sdk: MultiArchIndex, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    for key in ("IMAGEBUILD_WHEEL_INDEX", "IMAGEBUILD_PYPI_INDEX"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "1")
    with IndexServer(sdk.root, publish_hashes=True) as server:
        yield server


def lock(tmp_path: Path, sdk: MultiArchIndex, server: IndexServer, targets: str,
         extra: str = "", torch: str | None = None) -> dict:
    (tmp_path / "recipes").mkdir(exist_ok=True)
    path = tmp_path / "recipes" / "rocm-10.1.0.yaml"
    path.write_text(RECIPE.format(version=sdk.version, digest=DIGEST,
                                  index=server.url_for(f"{sdk.name}/"),
                                  torch=torch or sdk.torch_version, targets=targets,
                                  extra=extra))
    locked = lock_recipe(load_recipe(str(path)), LockOptions(cache_dir=tmp_path / "cache"))
    assert locked.device_extras == tuple(
        sorted(f"device-{t.strip()}" for t in targets.split(",")))
    return tomllib.loads(locked.path.read_text())


@pytest.mark.parametrize("targets", ["gfx942", "gfx942, gfx950"])
def test_the_lock_pins_the_device_packs_of_the_targets_only(
        tmp_path: Path, sdk: MultiArchIndex, served: IndexServer, targets: str) -> None:
    data = lock(tmp_path, sdk, served, targets)
    wanted = [t.strip() for t in targets.split(",")]
    packages = {p["name"]: p for p in data["packages"]}
    assert set(packages) == {"rocm", "rocm-sdk-core", "rocm-sdk-libraries", "torch",
                             *(f"rocm-sdk-device-{t}" for t in wanted),
                             *(f"amd-torch-device-{t}" for t in wanted)}
    for name, package in packages.items():
        entry = package.get("sdist") or package["wheels"][0]
        assert entry["url"].startswith(served.url_for(f"{sdk.name}/{name}/"))
        filename = entry["url"].rsplit("/", 1)[-1].replace("%2B", "+")
        assert entry["hashes"]["sha256"] == sha256_of(sdk.index_dir / name / filename)
    assert data["extras"] == [f"device-{t}" for t in wanted]
    tool = data["tool"]["imagebuild"]
    assert tool["wheel-layout"] == "multi-arch"
    assert tool["device-extras"] == data["extras"]
    assert tool["wheel-index"] == served.url_for(f"{sdk.name}/")
    assert "gpu-family" not in tool


def test_an_accepted_untested_target_is_locked_with_its_device_pack(
        tmp_path: Path, sdk: MultiArchIndex, served: IndexServer) -> None:
    data = lock(tmp_path, sdk, served, "gfx90a", extra="accept_untested_targets: [gfx90a]\n")
    names = {p["name"] for p in data["packages"]}
    assert {"rocm-sdk-device-gfx90a", "amd-torch-device-gfx90a"} <= names
    assert not {"rocm-sdk-device-gfx942", "amd-torch-device-gfx942"} & names


def test_a_target_the_release_has_no_device_code_for_is_refused(
        tmp_path: Path, served: IndexServer) -> None:
    small = make_multi_arch_index(tmp_path / "small", targets=("gfx942",))
    with IndexServer(small.root, publish_hashes=True) as server, \
            pytest.raises(LockError, match=r"provides no device-gfx950 extra \(it provides "
                                           r"device-gfx942\)"):
        lock(tmp_path, small, server, "gfx942, gfx950")
    assert not (tmp_path / "recipes" / "pylock.rocm-10.1.0.toml").exists()


def test_a_per_family_index_named_as_multi_arch_is_refused_with_the_hint(
        tmp_path: Path, served: IndexServer) -> None:
    from testbed.therock_index import make_rocm_sdk_index

    legacy = make_rocm_sdk_index(tmp_path / "legacy", version="10.1.0",
                                 torch_version="2.14.0+rocm10.1.0", python_tag="cp312")
    with IndexServer(legacy.root, publish_hashes=True) as server:
        index = MultiArchIndex(legacy.root, "gfx94X-dcgpu", legacy.version,
                               legacy.torch_version, ("gfx942",))
        with pytest.raises(LockError) as caught:
            lock(tmp_path, index, server, "gfx942")
    assert "provides no device extras" in str(caught.value)
    assert "{family}" in caught.value.hint


def test_device_code_of_another_target_in_a_resolution_is_refused(tmp_path: Path) -> None:
    """The check after resolution, at its seam: an index whose torch pulled every device
    pack (a device-all extra) gives code the recipe's GPUs never run."""
    from imagebuild.lock.therock import check_devices

    (tmp_path / "r.yaml").write_text(RECIPE.format(
        version="10.1.0", digest=DIGEST, index="https://m.example/whl-next/",
        torch="2.14.0+rocm10.1.0", targets="gfx942", extra=""))
    recipe = load_recipe(str(tmp_path / "r.yaml"))
    names = ["rocm", "rocm-sdk-core", "rocm-sdk-libraries", "torch",
             "rocm-sdk-device-gfx942", "amd-torch-device-gfx942"]
    check_devices(recipe, [{"name": n} for n in names])
    with pytest.raises(LockError, match="device code for other targets: "
                                        "amd-torch-device-gfx950, rocm-sdk-device-gfx950"):
        check_devices(recipe, [{"name": n} for n in
                               [*names, "rocm-sdk-device-gfx950", "amd-torch-device-gfx950"]])
    with pytest.raises(LockError, match="missing rocm-sdk-device-gfx942"):
        check_devices(recipe, [{"name": n} for n in names if n != "rocm-sdk-device-gfx942"])
