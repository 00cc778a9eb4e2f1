"""`imagebuild build`: lock check -> render -> build -> squash (-> push), skipping what is done.

Each stage is the library function of its module; this one only decides what needs doing.
An image is tagged with the hash of its build inputs (the rendered Dockerfile and every
staged context file), so a second build with nothing changed finds its image and returns
without touching the engine's builder; squash artifacts record the image id they came from
and are likewise reused.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from imagebuild.convert.artifacts import (
    Artifact,
    reusable_artifacts,
    write_edf_beside,
    write_record,
)
from imagebuild.convert.formats import convert
from imagebuild.convert.inventory import Inventory, InventoryScan, take_inventory
from imagebuild.convert.squashfs import (
    DEFAULT_COMPRESSION,
    Compression,
    find_squash_tool,
    reproducible_epoch,
)
from imagebuild.engine.base import Engine
from imagebuild.engine.build import build_image, resolve_site_ca
from imagebuild.engine.progress import BuildEvent
from imagebuild.engine.push import PushedImage, push_image
from imagebuild.engine.select import open_engine
from imagebuild.errors import LockError
from imagebuild.generated import write_all
from imagebuild.images import BUILD_HASH_LABEL, ImageRef, build_tag, latest_tag
from imagebuild.lock.check import current_lock
from imagebuild.lock.epoch import EPOCH_BUILD_ARG
from imagebuild.lock.model import Lock
from imagebuild.recipe.load import project_dir
from imagebuild.recipe.model import Recipe
from imagebuild.recipe.site import load_site
from imagebuild.render.context import BuildContext, build_context
from imagebuild.render.dockerfile import generated_dockerfile
from imagebuild.render.edf import generated_edf
from imagebuild.render.plan import make_plan

Say = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    backend: str | None = None
    builder: str | None = None
    site_ca: Path | None = None
    formats: tuple[str, ...] = ()
    output_dir: Path = Path("artifacts")
    site: str | None = None
    push: str | None = None
    no_cache: bool = False
    compression: Compression = DEFAULT_COMPRESSION
    #: how the built image's files are read for squash and inventory: auto (from the
    #: engine's storage where it can be read here, else export), storage or export
    read: str = "auto"


@dataclass(frozen=True)
class BuildResult:
    recipe: str
    image: ImageRef
    built: bool
    artifacts: tuple[Artifact, ...] = ()
    squashed: bool = False
    pushed: tuple[PushedImage, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)
    #: size table, SBOM and leftovers of the final image
    inventory: Inventory | None = None


def context_hash(context: BuildContext) -> str:
    """sha256 over every staged file's path, mode and bytes: the image's real inputs."""
    digest = hashlib.sha256()
    for name in context.files:
        path = context.directory / name
        digest.update(f"{name}\0{path.stat().st_mode & 0o777:o}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def build_recipe(recipe: Recipe, options: BuildOptions, *, engine: Engine | None = None,
                 say: Say = lambda _: None,
                 progress: Callable[[BuildEvent], None] | None = None) -> BuildResult:
    seconds: dict[str, float] = {}
    started = time.monotonic()
    lock = current_lock(recipe)  # LockError when stale
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; run `imagebuild lock {recipe.name}` first "
                        "(an image installs only what its lock pins)")
    plan = make_plan(recipe, lock)
    # `build` renders: the committed Dockerfile and EDF are brought up to date first.
    for item in write_all([generated_dockerfile(plan), generated_edf(recipe, project_dir())]):
        say(f"rendered {item.path}")
    engine = engine or open_engine(options.backend, builder=options.builder)
    site_ca = resolve_site_ca(options.site_ca)
    seconds["prepare"] = time.monotonic() - started

    with tempfile.TemporaryDirectory(prefix=f"imagebuild-{recipe.name}-") as tmp:
        context = build_context(plan, Path(tmp) / "context")
        build_hash = context_hash(context)
        tag, latest = build_tag(recipe, build_hash), latest_tag(recipe.name)
        existing = _existing_image(engine, tag, build_hash)
        if existing is not None and not options.no_cache:
            engine.tag(existing.image_id, latest)
            image, built = replace(existing, tags=(tag, latest)), False
            say(f"{tag} is up to date (inputs {build_hash[:19]}); nothing to build")
        else:
            started = time.monotonic()
            log_path = options.output_dir / recipe.name / "build.log"
            say(f"building {tag} with {engine.describe()} (log: {log_path})")
            image = build_image(
                engine, context.dockerfile, context.directory, [tag, latest],
                labels={BUILD_HASH_LABEL: build_hash}, build_args=epoch_build_args(lock),
                secrets={"site-ca": site_ca} if site_ca else None,
                log_path=log_path, progress=progress, builder=options.builder,
                no_cache=options.no_cache)
            built = True
            seconds["build"] = time.monotonic() - started

    artifacts: tuple[Artifact, ...] = ()
    squashed = False
    source = engine.image_source(image.ref, options.read)
    # One pass over the image's files gives the size table and the SBOM: the squash's
    # stream (which then carries the SBOM too), else an export of its own.
    # (dated like the build: the lock's SOURCE_DATE_EPOCH, else the image creation time)
    scan = InventoryScan(plan, lock.source_date_epoch if lock.source_date_epoch is not None
                         else reproducible_epoch(source.config()))
    if options.formats:
        started = time.monotonic()
        artifacts, squashed = _squash(recipe, engine, image, options, say, scan)
        seconds["squash"] = time.monotonic() - started
    started = time.monotonic()
    inventory = take_inventory(scan, source, options.output_dir.resolve(), recipe.name,
                               image.image_id)
    if inventory.scanned and not squashed:
        seconds["inventory"] = time.monotonic() - started
    pushed: tuple[PushedImage, ...] = ()
    if options.push:
        started = time.monotonic()
        pushed = push_image(engine, image, options.push)
        seconds["push"] = time.monotonic() - started
    return BuildResult(recipe.name, image, built, artifacts, squashed, pushed, seconds,
                       inventory)


def epoch_build_args(lock: Lock) -> dict[str, str]:
    """SOURCE_DATE_EPOCH as a build arg: BuildKit >= 0.11 dates the image config and its
    history with it (docker/buildkit docs/build-repro.md); no stage declares the ARG, so
    it keys no step's cache. The squash step clamps the files' mtimes in every case."""
    epoch = lock.source_date_epoch
    return {EPOCH_BUILD_ARG: str(epoch)} if epoch is not None else {}


def _existing_image(engine: Engine, tag: str, build_hash: str) -> ImageRef | None:
    if not engine.image_exists(tag):
        return None
    if engine.image_labels(tag).get(BUILD_HASH_LABEL) != build_hash:
        return None
    return ImageRef(ref=tag, image_id=engine.image_id(tag), tags=(tag,), backend=engine.backend)


# --- squash, reusing artifacts of the same image --------------------------------------------

def _squash(recipe: Recipe, engine: Engine, image: ImageRef, options: BuildOptions,
            say: Say, scan: InventoryScan | None = None) -> tuple[tuple[Artifact, ...], bool]:
    output_dir = options.output_dir.resolve()
    key = {"image_id": image.image_id, "formats": list(options.formats),
           "compression": str(options.compression), "site": options.site}
    reused = reusable_artifacts(output_dir, recipe.name, key)
    if reused is not None:
        say(f"artifacts of {image.image_id[:19]} are up to date in {output_dir}")
        return reused, False
    tool = find_squash_tool(None)
    artifacts = convert(engine.image_source(image.ref, options.read), output_dir,
                        recipe.name, options.formats, compression=options.compression, tool=tool,
                        image_ref=engine.daemon_ref(image.ref),
                        observer=scan)
    sqsh = next((a for a in artifacts if a.kind == "sqsh"), None)
    if options.site and sqsh is not None:
        site = load_site(options.site)
        config = engine.image_config(image.ref)
        artifacts.append(write_edf_beside(sqsh, recipe.name, site, rocm_version=recipe.rocm,
                                          workdir=config.workdir or None))
    write_record(output_dir, recipe.name, key, artifacts)
    return tuple(artifacts), True


def format_sizes(artifacts: Sequence[Artifact]) -> list[str]:
    return [f"{a.kind:5} {a.path}  {a.size / (1 << 20):.1f} MiB  sha256:{a.sha256[:16]}  "
            f"{a.seconds:.1f} s" + (f" (read: {a.timings.read_by})" if a.timings else "")
            for a in artifacts]
