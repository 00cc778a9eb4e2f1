"""`imagebuild build RECIPE --check-reproducible`: build again from scratch and compare.

After the normal build, the recipe is built a second time without the build cache, into its
own tag, through the same build-then-squash as the first (imagebuild.build.image: same
lock epoch, ``--read``, compression and tool), and both images are squashed into a
directory of their own; the two .sqsh must have the same sha256. When they do not, the
comparison names the first differing files and what differs in each
(imagebuild.convert.reproducible). The second image and both .sqsh are removed when they agree,
and kept for inspection when not.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from imagebuild.convert.reproducible import Comparison, compare_squashfs
from imagebuild.engine.base import Engine
from imagebuild.engine.progress import BuildEvent
from imagebuild.files import sha256_file
from imagebuild.images import ImageRef, build_tag, image_repository
from imagebuild.recipe.model import Recipe, short_hash

from .image import BuildOptions, BuiltImage, ImageJob, build_and_squash, context_hash, squash_built
from .prepare import PreparedBuild

Say = Callable[[str], None]


@dataclass(frozen=True)
class ReproducibilityCheck:
    first: ImageRef
    second: ImageRef
    comparison: Comparison
    #: where the two .sqsh are (removed when identical)
    directory: Path
    seconds: dict[str, float] = field(default_factory=dict)
    #: the two .sif (by sha256), when the build makes SIF with siftool
    sif: Comparison | None = None

    @property
    def reproducible(self) -> bool:
        return self.comparison.identical and (self.sif is None or self.sif.identical)


def recheck_tag(recipe: Recipe, build_hash: str) -> str:
    return f"{image_repository(recipe.name)}:{short_hash(build_hash)}-recheck"


def recheck_options(options: BuildOptions, directory: Path) -> BuildOptions:
    """The build's options for the two squashes compared: into ``directory``, no EDF, no
    push, always rebuilt (no registry cache either way); a .sif only when wanted and
    siftool wraps it (Apptainer's own export is not what the build's .sqsh is compared
    with)."""
    make_sif = "sif" in options.formats and shutil.which("siftool") is not None
    return replace(options, formats=("sqsh", "sif") if make_sif else ("sqsh",),
                   output_dir=directory, site=None, push=None, no_cache=True,
                   sif_method="siftool", cache_from=None, cache_to=None)


def check_reproducible(prepared: PreparedBuild, options: BuildOptions, first: BuiltImage, *,
                       engine: Engine, say: Say = lambda _: None,
                       progress: Callable[[BuildEvent], None] | None = None
                       ) -> ReproducibilityCheck:
    """Rebuild the recipe without cache beside ``first`` (its normal build) and compare the
    squashfs of both images."""
    recipe = prepared.recipe
    seconds: dict[str, float] = {}
    if prepared.lock.source_date_epoch is None:
        say(f"warning: {recipe.name}'s lock records no source-date-epoch (written by an older "
            f"imagebuild): squashing clamps to each image's creation time, so the two cannot "
            f"agree; run `imagebuild lock {recipe.name}` to record one")
    directory = options.output_dir.resolve() / recipe.name / "reproducible"
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    check_options = recheck_options(options, directory)
    with prepared.staged_context("recheck") as context:
        build_hash = context_hash(context)
        tag = recheck_tag(recipe, build_hash)
        # Both .sif name the build's own tag, so that the tag is no difference between them.
        job = ImageJob("second", context, (tag,), build_hash,
                       log_path=directory / "rebuild.log", reuse=False,
                       sif_ref=build_tag(recipe, build_hash))
        say(f"rebuilding {recipe.name} without cache as {tag}")
        second = build_and_squash(prepared, job, check_options, engine=engine, say=say,
                                  progress=progress)
    # The first image is squashed again here, the same way (an artifact of it may come from
    # an older imagebuild).
    first_squash = squash_built(prepared, replace(job, name="first"), first.image,
                                check_options, engine=engine, say=say)
    seconds["rebuild"] = second.seconds.get("build", 0.0)
    seconds["squash"] = second.seconds.get("squash", 0.0) + \
        first_squash.seconds.get("squash", 0.0)
    started = time.monotonic()
    check = ReproducibilityCheck(first.image, second.image,
                                 _compare(first_squash, second, "sqsh"), directory, seconds,
                                 _compare(first_squash, second, "sif")
                                 if second.artifact("sif") else None)
    seconds["compare"] = time.monotonic() - started
    if check.reproducible:
        engine.remove(tag)
        shutil.rmtree(directory, ignore_errors=True)
    return check


def _compare(first: BuiltImage, second: BuiltImage, kind: str) -> Comparison:
    one, two = first.artifact(kind), second.artifact(kind)
    assert one is not None and two is not None
    if kind == "sqsh":
        return compare_squashfs(one.path, two.path)
    return Comparison(one.path, two.path, sha256_file(one.path), sha256_file(two.path))
