"""The one build path at the engine seam: `imagebuild build`, its reproducibility rebuild and
the derived image of `--tuning` all build with the lock's epoch build arg, the site CA and
no-cache as asked, and read their images the way `--read` says; the lock is checked and the
Dockerfile rendered once per build.

The engine replays captured BuildKit output (tests/engine/fakes.py); the built image's files
are a small root filesystem tar, squashed for real by the squash tool found here. Docker
builds of the same paths run in tests/e2e/test_reproducible.py and
tests/tune/test_image_tuning.py.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagebuild.build import image as build_image_module
from imagebuild.build.image import BuildOptions
from imagebuild.build.pipeline import build_recipe, build_stage, stage_tag
from imagebuild.build.prepare import PreparedBuild, prepare_build
from imagebuild.build.recheck import check_reproducible
from imagebuild.cli import main
from imagebuild.convert.sources import TarballSource
from imagebuild.engine.base import BuildRequest
from imagebuild.errors import ImagebuildError, LockError
from imagebuild.images import BUILD_HASH_LABEL
from imagebuild.lock.epoch import EPOCH_BUILD_ARG
from imagebuild.lock.lockfile import lock_path
from imagebuild.recipe.load import load_recipe
from imagebuild.render import dockerfile as dockerfile_module
from imagebuild.tune.derive import TUNED_STAGE, build_derived
from tests.engine.conftest import captured
from tests.engine.fakes import ReplayEngine
from tests.inimage.checks.test_tuning_in_effect import cpu_bundle
from tests.render.conftest import FIXTURES

RECIPE = "cpu-test"


class LabelledEngine(ReplayEngine):
    """A replay engine whose images keep the labels they were built with."""

    def __init__(self, builds: int):
        super().__init__([(captured("buildkit-ok.log"), 0)] * builds)
        self.labels: dict[str, dict[str, str]] = {}
        self.dockerfiles: list[str] = []

    def build(self, request: BuildRequest, on_line=None, keep_lines=2000):
        self.dockerfiles.append(request.dockerfile.read_text())
        result = super().build(request, on_line, keep_lines)
        self.labels[f"sha256:{len(self.requests):064x}"] = dict(request.labels)
        return result

    def inspect(self, ref: str) -> dict[str, Any]:
        data = super().inspect(ref)
        data["Config"]["Labels"] = self.labels.get(data["Id"], {})
        return data


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project with the locked CPU test recipe; builds render into it."""
    root = tmp_path / "project"
    (root / "recipes").mkdir(parents=True)
    recipe = load_recipe(RECIPE, FIXTURES)
    shutil.copy(recipe.path, root / "recipes")
    shutil.copy(lock_path(recipe), root / "recipes")
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(root))
    monkeypatch.delenv("IMAGEBUILD_SITE_CA", raising=False)
    return root


@pytest.fixture
def opened(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every (image reference, read method) the build path opens; each image reads as the
    same small root filesystem."""
    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as tar:
        data = b'ID=debian\nVERSION_ID="12"\n'
        member = tarfile.TarInfo("etc/os-release")
        member.size, member.mtime = len(data), 1_700_000_000
        tar.addfile(member, io.BytesIO(data))
    calls: list[tuple[str, str]] = []

    def open_image(engine: Any, ref: str, read: str) -> TarballSource:
        calls.append((ref, read))
        return TarballSource(rootfs)

    monkeypatch.setattr(build_image_module, "open_image", open_image)
    return calls


def options(project: Path, **changes: Any) -> BuildOptions:
    return replace(BuildOptions(output_dir=project / "artifacts", read="export"), **changes)


def prepared(project: Path) -> PreparedBuild:
    return prepare_build(load_recipe(RECIPE, project))


def test_build_checks_the_lock_and_renders_once(project: Path, opened, monkeypatch):
    renders: list[str] = []
    render = dockerfile_module.render_dockerfile

    def counting(plan):  # the real renderer, counted
        renders.append(plan.recipe.name)
        return render(plan)

    monkeypatch.setattr("imagebuild.build.prepare.render_dockerfile", counting)
    site_ca = project / "ca.pem"
    site_ca.write_text("-----BEGIN CERTIFICATE-----\n")
    engine = LabelledEngine(builds=1)
    build = prepared(project)
    result = build_recipe(build, options(project, site_ca=site_ca), engine=engine)
    assert renders == [RECIPE]
    committed = (project / "dockerfiles" / RECIPE / "Dockerfile").read_text()
    assert engine.dockerfiles == [committed] == [build.dockerfile]
    request = engine.requests[0]
    assert request.build_args == {EPOCH_BUILD_ARG: str(build.lock.source_date_epoch)}
    assert request.secrets == {"site-ca": site_ca}
    assert result.built and result.inventory is not None
    # One opened source for the squash, the inventory and the EDF, read as asked.
    assert opened == [(result.image.ref, "export")]


def test_a_stale_lock_is_refused_before_anything_is_built(project: Path):
    path = project / "recipes" / f"{RECIPE}.yaml"
    path.write_text(path.read_text().replace("torch: 2.13.0+cpu", "torch: 2.12.0+cpu"))
    with pytest.raises(LockError, match="stale"):
        prepare_build(load_recipe(RECIPE, project))


def test_the_reproducibility_rebuild_builds_and_reads_like_the_build(project: Path, opened):
    engine = LabelledEngine(builds=2)
    build = prepared(project)
    wanted = options(project, formats=("sqsh",), compression=options(project).compression)
    first = build_recipe(build, wanted, engine=engine)
    check = check_reproducible(build, wanted, first, engine=engine)
    assert check.reproducible, check.comparison
    first_request, rebuild = engine.requests
    assert rebuild.no_cache and rebuild.tags == ()
    assert rebuild.build_args == first_request.build_args == \
        {EPOCH_BUILD_ARG: str(build.lock.source_date_epoch)}
    assert rebuild.labels == first_request.labels  # the same inputs, the same build hash
    assert engine.dockerfiles[0] == engine.dockerfiles[1] == build.dockerfile
    # Both images are read as --read says: the build's squash, then the rebuild and the
    # first image squashed again for the comparison.
    assert [read for _, read in opened] == ["export"] * 3
    assert opened[1][0] == check.second.ref and opened[2][0] == first.image.ref
    assert not engine.image_exists(check.second.ref)  # removed once they agree


def test_the_derived_image_builds_and_reads_like_the_build(project: Path, opened,
                                                           tmp_path: Path):
    engine = LabelledEngine(builds=2)
    build = prepared(project)
    torch = build.lock.wheel("torch")
    bundle_dir = tmp_path / "bundle"
    cpu_bundle(bundle_dir, recipe=RECIPE, torch_version=torch.version if torch else "")
    wanted = options(project, formats=("sqsh",), no_cache=True)
    base = build_recipe(build, replace(wanted, formats=()), engine=engine)
    derived = build_derived(build, base.image, bundle_dir, wanted, engine=engine)
    request = engine.requests[1]
    assert request.target == TUNED_STAGE and request.no_cache
    assert request.build_args == {EPOCH_BUILD_ARG: str(build.lock.source_date_epoch)}
    assert request.labels[BUILD_HASH_LABEL] != engine.requests[0].labels[BUILD_HASH_LABEL]
    # The rendered Dockerfile of the build, with the tuned stage appended.
    assert engine.dockerfiles[1].startswith(build.dockerfile)
    assert f"AS {TUNED_STAGE}" in engine.dockerfiles[1][len(build.dockerfile):]
    sqsh = derived.result.artifact("sqsh")
    assert derived.built and sqsh is not None and sqsh.path.name == f"{RECIPE}-tuned.sqsh"
    assert opened[-1] == (derived.image.ref, "export")


def test_a_stage_build_targets_that_stage_and_tags_no_latest(project: Path, opened):
    engine = LabelledEngine(builds=1)
    build = prepared(project)
    result = build_stage(build, options(project), "python", engine=engine)
    request = engine.requests[0]
    assert request.target == "python"
    assert request.build_args == {EPOCH_BUILD_ARG: str(build.lock.source_date_epoch)}
    build_hash = request.labels[BUILD_HASH_LABEL]
    assert result.image.tags == (stage_tag(RECIPE, build_hash, "python"),)
    assert result.image.tags[0].endswith("-python") and result.built
    assert opened == []  # nothing squashed or read
    assert (project / "artifacts" / RECIPE / "build-python.log").exists()


def test_an_unknown_stage_is_refused_before_any_build(project: Path):
    engine = LabelledEngine(builds=0)
    with pytest.raises(ImagebuildError) as raised:
        build_stage(prepared(project), options(project), "pyhton", engine=engine)
    assert raised.value.hint == "did you mean python? its stages: base, python, final"
    assert engine.requests == []


@pytest.mark.parametrize("flag", [["--squash", "sqsh"], ["--push", "registry.example"],
                                  ["--check-reproducible"], ["--plan"]])
def test_a_stage_build_refuses_what_needs_the_whole_image(project: Path, flag: list[str],
                                                          capsys):
    assert main(["build", RECIPE, "--stage", "python", *flag]) == 2
    assert (f"error: --stage python: not with {flag[0]} (a stage is not the recipe's "
            "image") in capsys.readouterr().err
