"""A derived image: a tuning bundle baked into a recipe's image, one layer on top of it.

``imagebuild build RECIPE --tuning DIR`` builds the recipe's image as usual, then this
module appends one more stage to the same rendered Dockerfile::

    FROM final AS tuned
    COPY tuning/ /opt/imagebuild/tuning/
    ENV HIPBLASLT_TUNING_OVERRIDE_FILE=... PYTORCH_TUNABLEOP_ENABLED=1 ...

and builds that stage from the same build context plus the bundle under ``tuning/``.
BuildKit keys each step by its instruction and inputs, and no earlier step reads
``tuning/``, so every step of the recipe's stages comes from its cache and only the COPY
runs; ``DerivedImage`` counts both from the build's own progress output. The variables are
the ones a run-time mount gets (tune.apply), pointing at the same place. It is built,
squashed and pushed by the build's one path (imagebuild.build.image), with the same options
as the recipe's image.

Tag: ``imagebuild/<recipe>:<base build hash>-tuned-<bundle digest>`` (12 hex digits
each), and ``imagebuild/<recipe>:tuned`` for the latest one. Its artifacts are
``<recipe>-tuned.sqsh`` / ``.sif`` / ``.toml``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.build.image import BuildOptions, BuiltImage, ImageJob, build_and_squash
from imagebuild.build.prepare import PreparedBuild
from imagebuild.components.hipblaslt import component as hipblaslt
from imagebuild.engine.base import Engine
from imagebuild.engine.progress import BuildEvent
from imagebuild.errors import TuneError
from imagebuild.files import canonical_digest
from imagebuild.images import BUILD_HASH_LABEL, ImageRef, image_repository
from imagebuild.inimage.tuning.bundle_format import (
    DEFAULT_MOUNT_POINT,
    Bundle,
    Target,
    tuning_env,
)
from imagebuild.lock.model import Lock
from imagebuild.recipe.model import Recipe, short_hash
from imagebuild.render.quoting import dockerfile_quote

from .bundle import bundle_digest, bundle_files, check_match, read_bundle

#: The stage the derived image is built from (the rendered Dockerfiles end with ``final``).
BASE_STAGE = "final"
TUNED_STAGE = "tuned"
#: Where the bundle sits in the build context (no stage of a recipe reads this directory).
CONTEXT_DIR = "tuning"
BUNDLE_LABEL = "org.imagebuild.tuning-bundle"
BASE_LABEL = "org.imagebuild.tuning-base"
LATEST_TUNED = "tuned"

Say = Callable[[str], None]


@dataclass(frozen=True)
class StepCounts:
    """Dockerfile steps of one build (FROM lines and BuildKit's internal steps aside)."""

    cached: tuple[str, ...] = ()
    built: tuple[str, ...] = ()


@dataclass(frozen=True)
class DerivedImage:
    image: ImageRef
    base: ImageRef
    bundle: Bundle
    bundle_digest: str
    #: its build, artifacts, inventory and push (imagebuild.build.image)
    result: BuiltImage
    steps: StepCounts = StepCounts()

    @property
    def built(self) -> bool:
        return self.result.built


class StepCounter:
    """A progress callback that counts cached and built Dockerfile steps, and passes every
    event on to ``forward``."""

    def __init__(self, forward: Callable[[BuildEvent], None] | None = None):
        self.forward = forward
        self._names: dict[str, str] = {}
        self._cached: list[str] = []
        self._built: list[str] = []

    def __call__(self, event: BuildEvent) -> None:
        if self.forward is not None:
            self.forward(event)
        if event.stage in (None, "internal") or event.step is None or \
                (event.instruction or "").upper().startswith("FROM "):
            return
        label = event.label
        if event.kind == "cached" and label not in self._cached:
            self._cached.append(label)
        elif event.kind == "done" and label not in self._cached and label not in self._built:
            self._built.append(label)

    def counts(self) -> StepCounts:
        return StepCounts(tuple(self._cached), tuple(self._built))


def recipe_target(recipe: Recipe, lock: Lock | None) -> Target:
    """What a recipe's image is, for matching a bundle: the recipe, and from its lock the
    torch version and the hipBLASLt commit (an image built with hipBLASLt from source)."""
    if lock is None:
        return Target(recipe=recipe.name)
    torch = next((w.version for w in lock.wheels if w.name == "torch"), None)
    locked = lock.git(hipblaslt.LOCK_KEY) if hipblaslt.section(recipe) else None
    hipblaslt_commit = locked.commit if locked else None
    return Target(torch_version=torch, hipblaslt_git_version=hipblaslt_commit,
                  recipe=recipe.name)


def checked_bundle(bundle_dir: Path, recipe: Recipe, lock: Lock | None) -> Bundle:
    """The bundle in ``bundle_dir``, refused (TuneError naming each field) when it was tuned
    in another recipe, torch or hipBLASLt build (the last two known from a lock only)."""
    bundle = read_bundle(bundle_dir)
    check_match(bundle, recipe_target(recipe, lock), bundle_dir)
    return bundle


def derived_tag(recipe: str, base_build_hash: str, digest: str) -> str:
    return f"{image_repository(recipe)}:{short_hash(base_build_hash)}-tuned-{short_hash(digest)}"


def tuned_stage(bundle: Bundle, digest: str, base_tag: str) -> str:
    """The Dockerfile stage appended to the recipe's: one COPY (the one layer), then ENV
    and LABEL (image configuration, no layer)."""
    env = tuning_env(bundle, DEFAULT_MOUNT_POINT)
    lines = [
        "",
        "# ---- tuned ---------------------------------------------------------------------------",
        "# The tuning bundle and the variables that load it, on top of the final stage",
        "# (imagebuild build --tuning); every step above comes from the build cache.",
        f"FROM {BASE_STAGE} AS {TUNED_STAGE}",
        f"COPY {CONTEXT_DIR}/ {DEFAULT_MOUNT_POINT}/",
    ]
    if env:
        lines.append("ENV " + " \\\n    ".join(f"{key}={dockerfile_quote(value)}"
                                                for key, value in env.items()))
    lines.append(f"LABEL {BUNDLE_LABEL}={dockerfile_quote(digest)} \\\n"
                 f"      {BASE_LABEL}={dockerfile_quote(base_tag)}")
    return "\n".join(lines) + "\n"


def stage_bundle(bundle_dir: Path, context_dir: Path) -> tuple[str, ...]:
    """Copy the bundle's files under ``context_dir/tuning``; modes normalised (0644 files,
    0755 directories) so the layer depends on the bytes only."""
    target = context_dir / CONTEXT_DIR
    target.mkdir(mode=0o755)
    copied = []
    for path in bundle_files(bundle_dir):
        relative = path.relative_to(bundle_dir)
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, destination)
        copied.append(f"{CONTEXT_DIR}/{relative.as_posix()}")
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return tuple(copied)


def build_derived(prepared: PreparedBuild, base: ImageRef, bundle_dir: Path,
                  options: BuildOptions, *, engine: Engine,
                  progress: Callable[[BuildEvent], None] | None = None,
                  say: Say = lambda _: None) -> DerivedImage:
    """Build (or find) the derived image of ``base`` (the recipe's image, as
    ``imagebuild build`` made it) with the bundle in ``bundle_dir``, then squash and push it
    as ``options`` say: artifacts ``<recipe>-tuned.*``, with its EDF when a site is given."""
    recipe = prepared.recipe
    bundle = checked_bundle(bundle_dir, recipe, prepared.lock)
    base_build_hash = engine.image_labels(base.image_id).get(BUILD_HASH_LABEL)
    if not base_build_hash:
        raise TuneError(f"{base.ref}: no {BUILD_HASH_LABEL} label; a derived image builds on "
                        "an image `imagebuild build` made")
    digest = bundle_digest(bundle_dir)
    tag = derived_tag(recipe.name, base_build_hash, digest)
    latest = f"{image_repository(recipe.name)}:{LATEST_TUNED}"
    name = f"{recipe.name}-tuned"
    counter = StepCounter(progress)
    with prepared.staged_context("tuned") as context:
        stage_bundle(bundle_dir, context.directory)
        with context.dockerfile.open("a", encoding="utf-8") as dockerfile:
            dockerfile.write(tuned_stage(bundle, digest, base.ref))
        say(f"{tag}: {base.ref} + tuning bundle {bundle_dir}")
        job = ImageJob(
            name, context, (tag, latest),
            canonical_digest({"base": base_build_hash, "bundle": digest}),
            log_path=options.output_dir / name / "build.log", target=TUNED_STAGE,
            edf_regenerate=f"imagebuild build {recipe.name} --tuning DIR --squash sqsh "
                           f"--site {options.site.name if options.site else 'SITE'}")
        result = build_and_squash(prepared, job, options, engine=engine, say=say,
                                  progress=counter)
    steps = counter.counts()
    if result.built:
        say(f"{tag}: {len(steps.cached)} steps from the build cache, {len(steps.built)} "
            f"built ({', '.join(steps.built) or 'none'})")
    return DerivedImage(result.image, base, bundle, digest, result, steps=steps)
