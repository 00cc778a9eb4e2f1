"""Locking a recipe whose ROCm comes from wheels, against a local PEP 503 index shaped like
TheRock's (testbed.therock_index.py: one index per GPU family, the rocm selector as an
sdist whose build picks the family, real METADATA and published sha256 on every link)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.errors import HashMismatch, LockError, WheelIndexError
from imagebuild.lock.index import WheelIndex
from imagebuild.lock.options import LockOptions
from imagebuild.lock.resolve import lock_recipe
from imagebuild.lock.sdist import sdist_build_requires
from imagebuild.recipe.load import load_recipe
from testbed.therock_index import RocmSdkIndex, make_rocm_sdk_index
from tests.support.indexserver import IndexServer, sha256_of

pytestmark = pytest.mark.integration

DIGEST = "sha256:" + "ab" * 32
RECIPE = """\
version: 1
rocm: {version}
rocm_from: wheels
base_image: 127.0.0.1:5000/imagebuild-test/debian:bookworm@{digest}
python: "3.11"
wheels:
  index_url: {index}{{family}}/
  packages:
    torch: {torch}
gpu_targets: [{target}]
"""


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> RocmSdkIndex:
    return make_rocm_sdk_index(tmp_path_factory.mktemp("therock"))


@pytest.fixture
def served(sdk: RocmSdkIndex, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    for key in ("IMAGEBUILD_WHEEL_INDEX", "IMAGEBUILD_PYPI_INDEX"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "1")
    with IndexServer(sdk.root, publish_hashes=True) as server:
        yield server


def write_recipe(tmp_path: Path, sdk: RocmSdkIndex, server: IndexServer, target: str) -> Path:
    (tmp_path / "recipes").mkdir(exist_ok=True)
    path = tmp_path / "recipes" / "therock.yaml"
    path.write_text(RECIPE.format(version=sdk.version, digest=DIGEST, index=server.url,
                                  torch=sdk.torch_version, target=target))
    return path


def lock(tmp_path: Path, path: Path) -> tuple[dict, object]:
    recipe = load_recipe(str(path))
    locked = lock_recipe(recipe, LockOptions(cache_dir=tmp_path / "cache"))
    return tomllib.loads(locked.path.read_text()), locked


@pytest.mark.parametrize(("target", "family"), [("gfx942", "gfx94X-dcgpu"),
                                                ("gfx950", "gfx950-dcgpu")])
def test_the_lock_pins_the_family_wheels_and_the_selector_sdist(
        tmp_path: Path, sdk: RocmSdkIndex, served: IndexServer, target: str,
        family: str) -> None:
    data, locked = lock(tmp_path, write_recipe(tmp_path, sdk, served, target))
    packages = {p["name"]: p for p in data["packages"]}
    assert set(packages) == {"rocm", "rocm-sdk-core", f"rocm-sdk-libraries-{family.lower()}",
                             "torch"}
    selector = packages["rocm"]["sdist"]
    assert "wheels" not in packages["rocm"]
    assert selector["url"] == served.url_for(f"{family}/rocm/rocm-{sdk.version}.tar.gz")
    served_file = sdk.index_dir(family) / "rocm" / f"rocm-{sdk.version}.tar.gz"
    assert selector["hashes"]["sha256"] == sha256_of(served_file)
    assert selector["size"] == served_file.stat().st_size
    for name in ("rocm-sdk-core", f"rocm-sdk-libraries-{family.lower()}", "torch"):
        wheel = packages[name]["wheels"][0]
        assert wheel["url"].startswith(served.url_for(f"{family}/"))
        filename = wheel["url"].rsplit("/", 1)[-1].replace("%2B", "+")
        assert wheel["hashes"]["sha256"] == sha256_of(sdk.index_dir(family) / name / filename)
    assert data["tool"]["imagebuild"]["gpu-family"] == family
    assert locked.selector is not None and locked.selector.name == "rocm"
    assert locked.gpu_family == family
    assert "rocm" not in {w.name for w in locked.wheels}


def test_an_index_of_another_family_fails_naming_the_family(
        tmp_path: Path, sdk: RocmSdkIndex, served: IndexServer) -> None:
    path = write_recipe(tmp_path, sdk, served, "gfx942")
    # A mirror that serves gfx950's index where gfx94X's was asked for.
    options = LockOptions(cache_dir=tmp_path / "cache",
                          index_url=served.url_for("gfx950-dcgpu/"))
    with pytest.raises(LockError) as caught:
        lock_recipe(load_recipe(str(path)), options)
    assert "rocm-sdk-libraries-gfx94x-dcgpu" in str(caught.value)
    assert not (tmp_path / "recipes" / "pylock.therock.toml").exists()


def test_a_file_whose_bytes_differ_from_the_published_hash_is_refused(
        tmp_path: Path, sdk: RocmSdkIndex, served: IndexServer) -> None:
    path = write_recipe(tmp_path, sdk, served, "gfx950")
    torch = next((sdk.index_dir("gfx950-dcgpu") / "torch").glob("*.whl"))
    served.published[torch.name] = "0" * 64
    with pytest.raises(HashMismatch, match="the index publishes"):
        lock(tmp_path, path)
    assert not (tmp_path / "recipes" / "pylock.therock.toml").exists()


def test_the_simple_index_reads_project_pages(sdk: RocmSdkIndex, served: IndexServer) -> None:
    index = WheelIndex(served.url_for("gfx950-dcgpu/"), simple=True)
    found = index.find("torch", sdk.torch_version, python="3.11")
    assert found.sha256 and found.url.startswith(index.project_url("torch"))
    with pytest.raises(WheelIndexError, match=r"lists no wheels of it"):
        index.find("torchvision", "0.24.0", python="3.11")
    local = WheelIndex(sdk.index_dir("gfx950-dcgpu"), simple=True)
    assert local.find("torch", sdk.torch_version, python="3.11").filename == found.filename


def test_the_selector_build_requirements_are_read_from_the_sdist(sdk: RocmSdkIndex) -> None:
    sdist = sdk.index_dir("gfx94X-dcgpu") / "rocm" / f"rocm-{sdk.version}.tar.gz"
    assert sdist_build_requires(sdist) == ()


def test_build_requirements_default_to_pep_517s_legacy_backend(tmp_path: Path) -> None:
    import io
    import tarfile

    def sdist(name: str, pyproject: str | None) -> Path:
        path = tmp_path / f"{name}.tar.gz"
        with tarfile.open(path, "w:gz") as archive:
            files = {f"{name}/setup.py": "from setuptools import setup\nsetup()\n"}
            if pyproject is not None:
                files[f"{name}/pyproject.toml"] = pyproject
            for member, text in files.items():
                info = tarfile.TarInfo(member)
                info.size = len(text.encode())
                archive.addfile(info, io.BytesIO(text.encode()))
        return path

    assert sdist_build_requires(sdist("legacy-1", None)) == ("setuptools>=40.8.0", "wheel")
    assert sdist_build_requires(sdist("modern-1", '[build-system]\nrequires = '
                                      '["setuptools>=61", "wheel"]\n')) == ("setuptools>=61",
                                                                          "wheel")


def test_a_warm_uv_cache_does_not_answer_for_another_family(
        tmp_path: Path, sdk: RocmSdkIndex, served: IndexServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """uv caches the selector's built metadata by URL, blind to ROCM_SDK_TARGET_FAMILY: the
    lock rebuilds it, so gfx942 asked of gfx950's index fails even after a gfx950 lock."""
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    first = tmp_path / "first"
    first.mkdir()
    lock(first, write_recipe(first, sdk, served, "gfx950"))
    second = tmp_path / "second"
    second.mkdir()
    path = write_recipe(second, sdk, served, "gfx942")
    options = LockOptions(cache_dir=second / "cache",
                          index_url=served.url_for("gfx950-dcgpu/"))
    with pytest.raises(LockError) as caught:
        lock_recipe(load_recipe(str(path)), options)
    # uv itself asked for gfx94X's libraries (the selector was rebuilt for the family), not
    # the family check after a resolution made with gfx950's cached metadata.
    assert "could not resolve" in str(caught.value)
    assert "rocm-sdk-libraries-gfx94x-dcgpu" in str(caught.value)
