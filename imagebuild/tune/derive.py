"""A derived image: a tuning bundle baked into a recipe's image, one layer on top of it.

``imagebuild build RECIPE --tuning DIR`` builds the recipe's image as usual, then this
module renders the same Dockerfile with one more stage::

    FROM final AS tuned
    COPY tuning/ /opt/imagebuild/tuning/
    ENV HIPBLASLT_TUNING_OVERRIDE_FILE=... PYTORCH_TUNABLEOP_ENABLED=1 ...

and builds that stage from the same build context plus the bundle under ``tuning/``.
BuildKit keys each step by its instruction and inputs, and no earlier step reads
``tuning/``, so every step of the recipe's stages comes from its cache and only the COPY
runs; ``DerivedImage`` counts both from the build's own progress output. The variables are
the ones a run-time mount gets (tune.apply), pointing at the same place.

Tag: ``imagebuild/<recipe>:<base build hash>-tuned-<bundle digest>`` (12 hex digits
each), and ``imagebuild/<recipe>:tuned`` for the latest one. Its artifacts are
``<recipe>-tuned.sqsh`` / ``.sif`` / ``.toml``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.convert.artifacts import (
    Artifact,
    reusable_artifacts,
    write_edf_beside,
    write_record,
)
from imagebuild.convert.formats import convert
from imagebuild.convert.sources import source_for_engine
from imagebuild.convert.squashfs import Compression, find_squash_tool
from imagebuild.engine.base import Engine
from imagebuild.engine.build import ImageRef, build_image, resolve_site_ca
from imagebuild.engine.progress import BuildEvent
from imagebuild.engine.tags import BUILD_HASH_LABEL, image_repository
from imagebuild.files import canonical_digest
from imagebuild.lock.check import current_lock
from imagebuild.lock.model import Lock
from imagebuild.pipeline import epoch_build_args
from imagebuild.recipe.model import Recipe, short_hash
from imagebuild.recipe.site import load_site
from imagebuild.render.context import build_context
from imagebuild.render.plan import make_plan
from imagebuild.render.quoting import dockerfile_quote

from .bundle import (
    DEFAULT_MOUNT_POINT,
    Bundle,
    Target,
    bundle_digest,
    bundle_files,
    check_match,
    read_bundle,
    tuning_env,
)
from .problem import TuneError

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
    built: bool
    steps: StepCounts = StepCounts()
    artifacts: tuple[Artifact, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)


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
    hipblaslt = lock.hipblaslt.commit if recipe.hipblaslt.enabled and lock.hipblaslt \
        else None
    return Target(torch_version=torch, hipblaslt_git_version=hipblaslt, recipe=recipe.name)


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


def _existing(engine: Engine, tag: str, build_hash: str) -> ImageRef | None:
    if not engine.image_exists(tag) or \
            engine.image_labels(tag).get(BUILD_HASH_LABEL) != build_hash:
        return None
    return ImageRef(ref=tag, image_id=engine.image_id(tag), tags=(tag,), backend=engine.backend)


def build_derived(recipe: Recipe, base: ImageRef, bundle_dir: Path, engine: Engine, *,
                  output_dir: Path, site_ca: Path | None = None,
                  builder: str | None = None, no_cache: bool = False,
                  progress: Callable[[BuildEvent], None] | None = None,
                  say: Say = lambda _: None) -> DerivedImage:
    """Build (or find) the derived image of ``base`` (the recipe's image, as
    ``imagebuild build`` made it) with the bundle in ``bundle_dir``."""
    lock = current_lock(recipe)
    if lock is None:
        raise TuneError(f"{recipe.name}: not locked; build the recipe first")
    bundle = checked_bundle(bundle_dir, recipe, lock)
    base_build_hash = engine.image_labels(base.image_id).get(BUILD_HASH_LABEL)
    if not base_build_hash:
        raise TuneError(f"{base.ref}: no {BUILD_HASH_LABEL} label; a derived image builds on "
                        "an image `imagebuild build` made")
    digest = bundle_digest(bundle_dir)
    tag = derived_tag(recipe.name, base_build_hash, digest)
    latest = f"{image_repository(recipe.name)}:{LATEST_TUNED}"
    build_hash = canonical_digest({"base": base_build_hash, "bundle": digest})
    existing = _existing(engine, tag, build_hash)
    if existing is not None and not no_cache:
        engine.tag(existing.image_id, latest)
        say(f"{tag} is up to date (bundle {short_hash(digest)}); nothing to build")
        return DerivedImage(ImageRef(tag, existing.image_id, (tag, latest), engine.backend),
                            base, bundle, digest, built=False)
    counter = StepCounter(progress)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"imagebuild-{recipe.name}-tuned-") as tmp:
        context = build_context(make_plan(recipe, lock), Path(tmp) / "context")
        stage_bundle(bundle_dir, context.directory)
        with context.dockerfile.open("a", encoding="utf-8") as dockerfile:
            dockerfile.write(tuned_stage(bundle, digest, base.ref))
        log_path = output_dir / f"{recipe.name}-tuned" / "build.log"
        say(f"building {tag}: {base.ref} + tuning bundle {bundle_dir} (log: {log_path})")
        ca = resolve_site_ca(site_ca)
        image = build_image(engine, context.dockerfile, context.directory, [tag, latest],
                            target=TUNED_STAGE,
                            labels={BUILD_HASH_LABEL: build_hash},
                            # the recipe's stages are keyed on the epoch: without it, none
                            # of their steps would come from the recipe build's cache
                            build_args=epoch_build_args(lock),
                            secrets={"site-ca": ca} if ca else None, log_path=log_path,
                            progress=counter, builder=builder, no_cache=no_cache)
    steps = counter.counts()
    say(f"{tag}: {len(steps.cached)} steps from the build cache, {len(steps.built)} built "
        f"({', '.join(steps.built) or 'none'})")
    return DerivedImage(image, base, bundle, digest, built=True, steps=steps,
                        seconds={"build tuned": time.monotonic() - started})


def squash_derived(derived: DerivedImage, recipe: Recipe, engine: Engine,
                   formats: tuple[str, ...], output_dir: Path, compression: Compression,
                   site: str | None, say: Say = lambda _: None) -> tuple[Artifact, ...]:
    """``<recipe>-tuned`` artifacts of the derived image (reused when they came from the
    same image and options), with its EDF when a site is given."""
    name = f"{recipe.name}-tuned"
    key = {"image_id": derived.image.image_id, "formats": list(formats),
           "compression": str(compression), "site": site}
    reused = reusable_artifacts(output_dir, name, key)
    if reused is not None:
        say(f"artifacts of {derived.image.image_id[:19]} are up to date in {output_dir}")
        return reused
    tool = find_squash_tool(None)
    artifacts = convert(source_for_engine(engine, derived.image.ref), output_dir, name,
                        formats, compression=compression, tool=tool,
                        image_ref=derived.image.ref if engine.backend == "docker" else None)
    sqsh = next((a for a in artifacts if a.kind == "sqsh"), None)
    if site and sqsh is not None:
        config = source_for_engine(engine, derived.image.ref).config()
        artifacts.append(write_edf_beside(
            sqsh, name, load_site(site), rocm_version=recipe.rocm,
            workdir=config.workdir or None,
            regenerate=f"imagebuild build {recipe.name} --tuning DIR --squash sqsh "
                       f"--site {site}"))
    write_record(output_dir, name, key, artifacts)
    return tuple(artifacts)
