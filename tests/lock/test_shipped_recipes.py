"""Every shipped recipe loads and locks: against a local index holding wheels named like its
pins (with the dependency metadata the real ones carry), a fixture PyPI, and git mirrors of
its source repositories. repo.radeon.com, GitHub and Docker Hub cannot be reached here, so
the shipped recipes stay unlocked in the repository (`imagebuild list`); this proves that
their pins name one exact cp312 file each, that the set agrees with its own Requires-Dist,
and that their refs and libfabric URL go through the mirrors users have for air-gapped
sites. What it cannot prove: that the files exist upstream under those names (the lock
fails naming the closest files when they do not) and the base image's digest (the copy
under test carries one, since no registry is reachable)."""

from __future__ import annotations

import shutil
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from imagebuild.components.transformer_engine import component as transformer_engine
from imagebuild.lock.lockfile import lock_path
from imagebuild.lock.model import LockedGit
from imagebuild.lock.options import LockOptions
from imagebuild.lock.resolve import lock_recipe
from imagebuild.lock.status import lock_status
from imagebuild.recipe.load import load_recipe, recipe_names
from testbed.rocm_wheels import make_pypi_index, make_rocm_wheels, pypi_requirements
from testbed.therock_index import make_multi_arch_index
from testbed.transformer_engine import TE_REQUIRES, make_transformer_engine
from tests.lock.conftest import git_repo
from tests.support.indexserver import IndexServer, make_wheel, sha256_of, wheel_filename

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = recipe_names(ROOT)
#: The TheRock lines, whose ROCm comes from AMD's multi-arch index.
MULTI_ARCH = [name for name in SHIPPED
              if load_recipe(str(ROOT / "recipes" / f"{name}.yaml")).multi_arch]
GITHUB = "https://github.com/"
BASE_DIGEST = "sha256:" + "5e" * 32


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[IndexServer]:
    for key in ("IMAGEBUILD_WHEEL_INDEX", "IMAGEBUILD_PYPI_INDEX", "IMAGEBUILD_GIT_MIRRORS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "2")
    monkeypatch.setenv("IMAGEBUILD_HTTP_TIMEOUT", "5")
    with IndexServer(tmp_path / "served") as server:
        yield server


def copy_project(tmp_path: Path, name: str) -> Path:
    """The shipped recipes (and their parents) in a fresh project; ``name``'s base image
    pinned by a digest, as no registry is reachable."""
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    for source in (ROOT / "recipes").glob("*.yaml"):
        shutil.copy2(source, project / "recipes" / source.name)
    path = project / "recipes" / f"{name}.yaml"
    base_image = load_recipe(str(path)).base_image
    text = path.read_text()
    pinned = f"base_image: {base_image}@{BASE_DIGEST}\n"
    if f"base_image: {base_image}\n" in text:
        path.write_text(text.replace(f"base_image: {base_image}\n", pinned))
    else:  # inherited from the recipe it extends
        path.write_text(text + pinned)
    return path


def mirror_repository(mirror: Path, repository: str, ref: str) -> str:
    """A local repository where ``repository`` (a GitHub URL) maps under ``mirror``, with
    ``ref`` on its first commit; returns that commit."""
    assert repository.startswith(GITHUB), repository
    return git_repo(mirror / repository.removeprefix(GITHUB), ref, annotated=True)


def test_the_rocm_7_2_line_is_shipped() -> None:
    assert any(name.startswith("rocm-7.2.") for name in SHIPPED), SHIPPED


def test_the_therock_lines_are_shipped() -> None:
    assert any(name.startswith("rocm-7.14.") for name in MULTI_ARCH), MULTI_ARCH
    assert any(name.startswith("rocm-10.") for name in MULTI_ARCH), MULTI_ARCH


def test_the_7_14_line_has_a_recipe_per_python() -> None:
    pythons = {load_recipe(str(ROOT / "recipes" / f"{name}.yaml")).python
               for name in MULTI_ARCH if name.startswith("rocm-7.14.")}
    assert pythons == {"3.12", "3.13", "3.14"}, pythons


@pytest.mark.parametrize("name", MULTI_ARCH)
def test_shipped_therock_recipe_locks_against_a_multi_arch_fixture_index(
        name: str, tmp_path: Path, served: IndexServer,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its pins against an index shaped like AMD's multi-arch one (testbed.therock_index:
    torch and torchvision with a device extra per target, device packs for more targets
    than the recipe's, the selector sdist, published hashes, each wheel built for CPython
    3.12, 3.13 and 3.14), served under the recipe's own index path: only the recipe's
    targets' device code is locked, and the wheels of the recipe's own Python (a recipe per
    Python on these lines)."""
    path = copy_project(tmp_path, name)
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(path.parents[1]))
    recipe = load_recipe(str(path))
    pins = dict(recipe.wheels.pinned)
    index_path = urlsplit(recipe.wheels.index_url).path.strip("/")
    sdk = make_multi_arch_index(served.directory, name=index_path, version=recipe.rocm or "",
                                targets=("gfx90a", "gfx942", "gfx950", "gfx1100"),
                                pins=pins, python_tags=("cp312", "cp313", "cp314"))
    make_pypi_index(served.directory / "simple",
                    [*pypi_requirements(pins), *recipe.wheels.extra])
    index_url = served.url_for(f"{index_path}/")
    lock = lock_recipe(recipe, LockOptions(index_url=index_url,
                                           pypi_url=served.url_for("simple/"),
                                           cache_dir=tmp_path / "cache"))
    for project, version in pins.items():
        wheel = lock.wheel(project)
        assert wheel is not None and wheel.version == version, project
        filename = wheel.url.rsplit("/", 1)[-1].replace("%2B", "+")
        assert wheel.sha256 == sha256_of(sdk.index_dir / project / filename)
        tag = "cp" + recipe.python.replace(".", "")
        assert f"-{tag}-{tag}-" in filename, (project, filename)
    assert lock.index_pythons == ("3.12", "3.13", "3.14")
    targets = [t.split(":")[0] for t in recipe.gpu_targets]
    devices = {w.name for w in lock.wheels if "-device-" in w.name}
    assert devices == {f"{prefix}-{t}" for t in targets for prefix in (
        "rocm-sdk-device", "amd-torch-device", "amd-torchvision-device")}
    assert lock.device_extras == tuple(f"device-{t}" for t in sorted(targets))
    assert lock.selector is not None and lock.selector.version == recipe.rocm
    assert {w.name for w in lock.wheels} >= {"numpy", "sympy", "filelock", "rocm-sdk-core",
                                            "rocm-sdk-libraries"}
    assert lock_status(recipe).state == "locked"


@pytest.mark.parametrize("name", [n for n in SHIPPED if n not in MULTI_ARCH])
def test_shipped_recipe_locks_against_a_fixture_index(name: str, tmp_path: Path,
                                                      served: IndexServer,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    path = copy_project(tmp_path, name)
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(path.parents[1]))
    recipe = load_recipe(str(path))
    pins = dict(recipe.wheels.pinned)
    release = f"rocm-rel-{recipe.rocm}"
    made = make_rocm_wheels(served.directory / release, pins)
    # What makes pinning hard upstream: another build of the same torch, a cp310 set.
    other_build = pins["torch"].rsplit(".git", 1)[0] + ".git0badc0de"
    make_wheel(served.directory / release, "torch", other_build)
    make_rocm_wheels(served.directory / release, pins, python_tag="cp310")
    # TransformerEngine from the index (wheels and the extension's sdist) or from source.
    section = transformer_engine.section(recipe)
    engine = section if section is not None and section.source is None else None
    engine_files = (make_transformer_engine(served.directory / release, engine.version)
                    if engine else {})
    make_pypi_index(served.directory / "simple",
                    [*pypi_requirements(pins), *recipe.wheels.extra,
                     *(TE_REQUIRES + ("setuptools", "wheel") if engine else ())])

    mirror = tmp_path / "github"
    sections: Any = recipe.components
    hipblaslt = sections["hipblaslt"].source
    hipblaslt_commit = mirror_repository(mirror, hipblaslt.repository, hipblaslt.ref)
    plugin = sections["network_plugin"].source
    plugin_commit = mirror_repository(mirror, plugin.repository, plugin.ref)
    megatron = sections["megatron"].source
    megatron_commit = mirror_repository(mirror, megatron.repository, megatron.ref)
    tests = sections["rccl_tests"].source
    tests_commit = mirror_repository(mirror, tests.repository, tests.ref)
    expected = {"hipblaslt": hipblaslt_commit, "network-plugin": plugin_commit,
                "megatron": megatron_commit, "rccl-tests": tests_commit}
    if section is not None and section.source is not None:
        expected["transformer-engine"] = mirror_repository(
            mirror, section.source.repository, section.source.ref)
    blis = sections["hipblaslt"].blis
    if blis is not None:  # the clients' AOCL-BLIS, by the same mirror
        expected["aocl-blis"] = mirror_repository(mirror, blis.repository, blis.ref)
    tuner = sections.get("rccl_tuner")
    if tuner is not None and tuner.enabled:
        expected["rccl-tuner"] = mirror_repository(mirror, tuner.source.repository,
                                                   tuner.source.ref)
    libfabric_url = sections["network_plugin"].libfabric.url
    archive = mirror / libfabric_url.removeprefix(GITHUB)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"libfabric release archive " * 100)

    lock = lock_recipe(recipe, LockOptions(
        index_url=served.url_for(f"{release}/"), pypi_url=served.url_for("simple/"),
        git_mirrors={GITHUB: f"file://{mirror}/"}, cache_dir=tmp_path / "cache"))

    for project, version in pins.items():
        wheel = lock.wheel(project)
        assert wheel is not None and wheel.version == version, project
        assert wheel.filename == wheel_filename(project, version)
        assert wheel.url == served.url_for(f"{release}/{wheel.filename}")
        assert wheel.sha256 == sha256_of(made[project])
    assert {w.name for w in lock.wheels} >= {"numpy", "sympy", "filelock"}
    commits = {key: source.commit for key, source in lock.sources.items()
               if isinstance(source, LockedGit)}
    assert commits == expected
    assert lock.sources["rccl-tests"] == LockedGit(
        f"file://{mirror}/ROCm/rccl-tests.git", "develop", tests_commit)
    if blis is not None:
        assert lock.sources["aocl-blis"] == LockedGit(
            f"file://{mirror}/amd/blis.git", blis.ref, expected["aocl-blis"])
    if engine is not None:
        for project in ("transformer-engine", "transformer-engine-rocm"):
            wheel = lock.wheel(project)
            assert wheel is not None and wheel.sha256 == sha256_of(engine_files[project])
        sdist = lock.sdist("transformer-engine-torch")
        assert sdist is not None and sdist.version == engine.version
        assert sdist.sha256 == sha256_of(engine_files["transformer-engine-torch"])
    assert {w.name for w in lock.wheels} >= {"einops", "sentencepiece", "tiktoken", "pybind11"}
    libfabric = lock.archive("libfabric")
    assert libfabric is not None and libfabric.sha256 == sha256_of(archive)
    assert urlsplit(libfabric.url).scheme == "file"
    assert lock.base_digest == BASE_DIGEST
    assert lock_status(recipe).state == "locked"
    tool = tomllib.loads(lock_path(recipe).read_text())["tool"]["imagebuild"]
    assert tool["wheel-index"] == served.url_for(f"{release}/")
