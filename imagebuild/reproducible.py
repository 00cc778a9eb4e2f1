"""`imagebuild build RECIPE --check-reproducible`: build again from scratch and compare.

After the normal build, the recipe is built a second time without the build cache, into its
own tag, and both images are squashed the same way (same lock epoch, compression and tool);
the two .sqsh must have the same sha256. When they do not, the comparison names the first
differing files and what differs in each (imagebuild.convert.reproducible). The second
image and both .sqsh are removed when they agree, and kept for inspection when not.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.convert import sif
from imagebuild.convert.artifacts import Artifact
from imagebuild.convert.inventory import recipe_scan
from imagebuild.convert.reproducible import Comparison, compare_squashfs
from imagebuild.convert.squashfs import find_squash_tool, squash_image
from imagebuild.engine.base import Engine
from imagebuild.engine.build import build_image, resolve_site_ca
from imagebuild.engine.progress import BuildEvent
from imagebuild.errors import LockError
from imagebuild.files import sha256_file
from imagebuild.images import BUILD_HASH_LABEL, ImageRef, build_tag, image_repository
from imagebuild.lock.check import current_lock
from imagebuild.pipeline import BuildOptions, BuildResult, context_hash, epoch_build_args
from imagebuild.recipe.model import Recipe, short_hash
from imagebuild.render.context import build_context
from imagebuild.render.plan import make_plan

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


def check_reproducible(recipe: Recipe, options: BuildOptions, first: BuildResult, *,
                       engine: Engine, say: Say = lambda _: None,
                       progress: Callable[[BuildEvent], None] | None = None
                       ) -> ReproducibilityCheck:
    """Rebuild ``recipe`` without cache beside ``first`` (its normal build) and compare the
    squashfs of both images."""
    seconds: dict[str, float] = {}
    lock = current_lock(recipe)
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; run `imagebuild lock {recipe.name}` first")
    if lock.source_date_epoch is None:
        say(f"warning: {recipe.name}'s lock records no source-date-epoch (written by an older "
            f"imagebuild): squashing clamps to each image's creation time, so the two cannot "
            f"agree; run `imagebuild lock {recipe.name}` to record one")
    directory = options.output_dir.resolve() / recipe.name / "reproducible"
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"imagebuild-{recipe.name}-recheck-") as tmp:
        context = build_context(make_plan(recipe, lock), Path(tmp) / "context")
        build_hash = context_hash(context)
        tag = recheck_tag(recipe, build_hash)
        site_ca = resolve_site_ca(options.site_ca)
        say(f"rebuilding {recipe.name} without cache as {tag}")
        second = build_image(
            engine, context.dockerfile, context.directory, [tag],
            labels={BUILD_HASH_LABEL: build_hash}, build_args=epoch_build_args(lock),
            secrets={"site-ca": site_ca} if site_ca else None,
            log_path=directory / "rebuild.log", progress=progress, builder=options.builder,
            no_cache=True)
    seconds["rebuild"] = time.monotonic() - started

    # Both images are squashed here, as the build squashes them (SBOM included), the same way
    # (an artifact of the first one may come from an older imagebuild); the .sif, when
    # wanted, name the same build tag.
    started = time.monotonic()
    tool = find_squash_tool(None)
    make_sif = "sif" in options.formats and shutil.which("siftool") is not None
    squashed: list[Artifact] = []
    sifs: list[Path] = []
    for name, image in (("first", first.image), ("second", second)):
        source = engine.image_source(image.ref)
        result = squash_image(source, directory / f"{name}.sqsh",
                              compression=options.compression, tool=tool,
                              observer=recipe_scan(recipe, source))
        squashed.append(result.artifact)
        if make_sif:
            sifs.append(sif.wrap_squashfs(
                result.artifact.path, directory / f"{name}.sif", source.config(),
                image_ref=build_tag(recipe, build_hash),
                partition_sha256=result.artifact.sha256).path)
    seconds["squash"] = time.monotonic() - started
    started = time.monotonic()
    check = ReproducibilityCheck(
        first.image, second, compare_squashfs(squashed[0].path, squashed[1].path), directory,
        seconds, Comparison(sifs[0], sifs[1], sha256_file(sifs[0]), sha256_file(sifs[1]))
        if sifs else None)
    seconds["compare"] = time.monotonic() - started
    if check.reproducible:
        engine.remove(tag)
        shutil.rmtree(directory, ignore_errors=True)
    return check
