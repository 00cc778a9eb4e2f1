"""A recipe per Python on the TheRock lines: one multi-arch index, built for several CPythons
(testbed.therock_index.make_multi_arch_index ``python_tags``), served over HTTP on
127.0.0.1; each recipe locks the wheels of its own Python, the lock records which Pythons
the index has every pin for, and a Python it has none for is refused naming those it has."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.lock.lockfile import lock_path
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
base_image: 127.0.0.1:5000/imagebuild-test/python:{python}@{digest}
python: "{python}"
wheels:
  index_url: {index}
  packages:
    torch: {torch}
gpu_targets: [gfx942]
"""


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory) -> MultiArchIndex:
    """A release built for 3.12 and 3.13, not 3.14."""
    return make_multi_arch_index(tmp_path_factory.mktemp("pythons"), targets=("gfx942",),
                                 python_tags=("cp312", "cp313"))


@pytest.fixture
def served(sdk: MultiArchIndex, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    for key in ("IMAGEBUILD_WHEEL_INDEX", "IMAGEBUILD_PYPI_INDEX"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "1")
    with IndexServer(sdk.root, publish_hashes=True) as server:
        yield server


def write_recipe(tmp_path: Path, sdk: MultiArchIndex, server: IndexServer,
                 python: str) -> Path:
    (tmp_path / "recipes").mkdir(exist_ok=True)
    path = tmp_path / "recipes" / f"rocm-{sdk.version}-py{python}.yaml"
    path.write_text(RECIPE.format(version=sdk.version, python=python, digest=DIGEST,
                                  index=server.url_for(f"{sdk.name}/"),
                                  torch=sdk.torch_version))
    return path


@pytest.mark.parametrize("python", ["3.12", "3.13"])
def test_each_python_locks_the_wheels_built_for_it(
        tmp_path: Path, sdk: MultiArchIndex, served: IndexServer, python: str) -> None:
    recipe = load_recipe(str(write_recipe(tmp_path, sdk, served, python)))
    lock = lock_recipe(recipe, LockOptions(cache_dir=tmp_path / "cache"))
    tag = "cp" + python.replace(".", "")
    torch = lock.wheel("torch")
    assert torch is not None and f"-{tag}-{tag}-" in torch.filename, torch
    assert torch.sha256 == sha256_of(sdk.index_dir / "torch" / torch.filename)
    assert lock.index_pythons == ("3.12", "3.13")
    data = tomllib.loads(lock.path.read_text())
    assert data["requires-python"] == f"=={python}.*"
    assert data["tool"]["imagebuild"]["index-pythons"] == ["3.12", "3.13"]


def test_a_python_the_index_has_no_wheels_for_is_refused_naming_those_it_has(
        tmp_path: Path, sdk: MultiArchIndex, served: IndexServer) -> None:
    recipe = load_recipe(str(write_recipe(tmp_path, sdk, served, "3.14")))
    with pytest.raises(LockError) as caught:
        lock_recipe(recipe, LockOptions(cache_dir=tmp_path / "cache"))
    message = str(caught.value)
    assert "python 3.14" in message
    assert f"torch=={sdk.torch_version} (for Python 3.12, 3.13)" in message
    assert "serves every pin for Python 3.12, 3.13" in message
    assert "set the recipe's python" in (caught.value.hint or "")
    assert not lock_path(recipe).exists()  # no half-written lock
