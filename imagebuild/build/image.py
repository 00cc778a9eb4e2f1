"""Build one image from a staged context and squash it: the one build-then-squash of
``imagebuild build``, its ``--check-reproducible`` rebuild and its ``--tuning`` derived image.

build (or reuse the image tagged with the same input hash) -> open the image once -> squash
the formats, the EDF beside the .sqsh, the inventory and SBOM (from the squash's own stream,
else one export) -> record -> push. Every option (``--read``, compression, formats, site,
site CA, no-cache, the lock's epoch build arg) reaches each of the three the same way.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from imagebuild.build.inventory import inventory_scan
from imagebuild.build.oci_labels import oci_labels
from imagebuild.build.sbom_attach import attach_sbom
from imagebuild.build.stage_plan import (
    STAGE_DIGESTS_LABEL,
    label_value,
    stage_cache_keys,
    stage_digests,
)
from imagebuild.convert.artifacts import (
    Artifact,
    reusable_artifacts,
    write_edf_beside,
    write_record,
)
from imagebuild.convert.formats import convert
from imagebuild.convert.inventory import Inventory, InventoryScan, take_inventory
from imagebuild.convert.sources import ImageSource
from imagebuild.convert.squashfs import (
    DEFAULT_COMPRESSION,
    Compression,
    find_squash_tool,
    reproducible_epoch,
)
from imagebuild.engine.base import Engine
from imagebuild.engine.build import build_image, resolve_site_ca
from imagebuild.engine.cache import RegistryCache
from imagebuild.engine.progress import BuildEvent
from imagebuild.engine.push import PushedImage, push_image
from imagebuild.engine.stage_table import StageTable
from imagebuild.files import sha256_file, write_text_atomic
from imagebuild.images import BUILD_HASH_LABEL, ImageRef
from imagebuild.recipe.load import project_dir
from imagebuild.recipe.site import SiteProfile
from imagebuild.render.context import BuildContext
from imagebuild.render.edf import edf_workdir

from .prepare import PreparedBuild

Say = Callable[[str], None]


@dataclass(frozen=True)
class BuildOptions:
    """What the user chose for a build; the same for every image the build makes."""

    backend: str | None = None
    builder: str | None = None
    site_ca: Path | None = None
    formats: tuple[str, ...] = ()
    output_dir: Path = Path("artifacts")
    #: the site profile of the EDF written beside a .sqsh (loaded, so a wrong name stops the
    #: build before it starts)
    site: SiteProfile | None = None
    push: str | None = None
    no_cache: bool = False
    compression: Compression = DEFAULT_COMPRESSION
    #: how the built image's files are read for squash and inventory: auto (from the
    #: engine's storage where it can be read here, else export), storage or export
    read: str = "auto"
    #: how a .sif is made: auto (Apptainer when installed, else siftool around the .sqsh),
    #: apptainer or siftool
    sif_method: str = "auto"
    #: registry repositories of the stage cache (imagebuild.engine.cache): imported from,
    #: exported to
    cache_from: str | None = None
    cache_to: str | None = None


@dataclass(frozen=True)
class ImageJob:
    """One image of a build: what it is called, where it is built from and how it is tagged."""

    #: base name of its artifacts (``<name>.sqsh``, ``<name>.toml``, ``<name>.cdx.json``)
    name: str
    context: BuildContext
    #: the first is the image's own (input-hash) tag, the others move to it
    tags: tuple[str, ...]
    #: recorded in the image's BUILD_HASH_LABEL; an image with the same tag and hash is reused
    build_hash: str
    log_path: Path
    #: the Dockerfile stage to build (None: the last one)
    target: str | None = None
    #: False: always build (a rebuild that must not find the first image)
    reuse: bool = True
    #: the image reference a SIF records (default: the image's own tag)
    sif_ref: str | None = None
    #: the command that rewrites the EDF beside the .sqsh (default: the EDF renderer's)
    edf_regenerate: str | None = None


@dataclass(frozen=True)
class BuiltImage:
    image: ImageRef
    built: bool
    artifacts: tuple[Artifact, ...] = ()
    #: False when the artifacts were those of an earlier squash of the same image
    squashed: bool = False
    inventory: Inventory | None = None
    pushed: tuple[PushedImage, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)
    #: where each step came from (registry cache, local cache, built), when it was built
    stages: StageTable | None = None
    #: why the engine attached no provenance attestation ("" when it did, or nothing built)
    provenance_note: str = ""
    #: the SBOM artifact attached to the pushed image (imagebuild.build.sbom_attach)
    sbom_ref: str | None = None

    def artifact(self, kind: str) -> Artifact | None:
        return next((a for a in self.artifacts if a.kind == kind), None)


def context_hash(context: BuildContext) -> str:
    """sha256 over every staged file's path, mode and bytes: the image's real inputs."""
    digest = hashlib.sha256()
    for name in context.files:
        path = context.directory / name
        digest.update(f"{name}\0{path.stat().st_mode & 0o777:o}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()


def open_image(engine: Engine, ref: str, read: str) -> ImageSource:
    """The one place a build opens a built image for reading (squash, inventory, EDF)."""
    return engine.image_source(ref, read)


def build_and_squash(prepared: PreparedBuild, job: ImageJob, options: BuildOptions, *,
                     engine: Engine, say: Say = lambda _: None,
                     progress: Callable[[BuildEvent], None] | None = None) -> BuiltImage:
    """Build (or reuse) the image of ``job``, then squash, inventory and push it as
    ``options`` say."""
    started = time.monotonic()
    table = StageTable(progress)
    image, built = build_or_reuse(prepared, job, options, engine=engine, say=say,
                                  progress=table)
    seconds = {"build": time.monotonic() - started} if built else {}
    result = squash_built(prepared, job, image, options, engine=engine, say=say)
    seconds.update(result.seconds)
    pushed: tuple[PushedImage, ...] = ()
    sbom_ref = None
    if options.push:
        started = time.monotonic()
        # The canonical (input hash) tag only: in a registry, no tag moves but by promotion
        # (imagebuild.promote); `latest` names the recipe's last build here.
        pushed = push_image(engine, replace(image, tags=image.tags[:1]), options.push)
        if result.inventory is not None:
            sbom_ref = attach_sbom(pushed[0], result.inventory.sbom)
        seconds["push"] = time.monotonic() - started
        if options.site is not None and options.site.sarus_suite is not None and pushed:
            # Sarus Suite runs registry references only: its EDF exists once pushed.
            result = replace(result, artifacts=result.artifacts + (write_sarus_edf(
                prepared, job, options, pushed[0].pinned, result.artifact("sqsh")),))
    return replace(result, built=built, pushed=pushed, seconds=seconds, sbom_ref=sbom_ref,
                   stages=table if built else None,
                   provenance_note=(engine.attestation_problem() or "") if built else "")


def build_or_reuse(prepared: PreparedBuild, job: ImageJob, options: BuildOptions, *,
                   engine: Engine, say: Say = lambda _: None,
                   progress: Callable[[BuildEvent], None] | None = None
                   ) -> tuple[ImageRef, bool]:
    """The image of ``job``: the one tagged with its build hash, else built now."""
    tag = job.tags[0]
    existing = _existing_image(engine, tag, job.build_hash) \
        if job.reuse and not options.no_cache else None
    if existing is not None:
        for moving in job.tags[1:]:
            engine.tag(existing.image_id, moving)
        say(f"{tag} is up to date (inputs {job.build_hash[:19]}); nothing to build")
        return replace(existing, tags=job.tags), False
    say(f"building {tag} with {engine.describe()} (log: {job.log_path})")
    site_ca = resolve_site_ca(options.site_ca)
    cache = None
    if options.cache_from or options.cache_to:
        cache = RegistryCache(options.cache_from, options.cache_to,
                              stage_cache_keys(job.context, job.target))
    image = build_image(
        engine, job.context.dockerfile, job.context.directory, list(job.tags),
        target=job.target, labels=build_labels(prepared, job),
        build_args=prepared.epoch_build_args(),
        secrets={"site-ca": site_ca} if site_ca else None, log_path=job.log_path,
        progress=progress, builder=options.builder, no_cache=options.no_cache,
        cache=cache, provenance=engine.attestation_problem() is None)
    return image, True


def build_labels(prepared: PreparedBuild, job: ImageJob) -> dict[str, str]:
    """The labels a build adds to the Dockerfile's own: imagebuild's input hash and stage
    digests, and the OCI provenance labels the recipe does not set itself
    (imagebuild.build.oci_labels)."""
    own = {key for key, _ in prepared.recipe.labels}
    labels = {key: value for key, value in oci_labels(
        project_dir(), prepared.lock.source_date_epoch).items() if key not in own}
    labels.update({BUILD_HASH_LABEL: job.build_hash, STAGE_DIGESTS_LABEL: label_value(
        stage_digests(job.context, prepared.epoch_build_args()))})
    return labels


def squash_built(prepared: PreparedBuild, job: ImageJob, image: ImageRef,
                 options: BuildOptions, *, engine: Engine,
                 say: Say = lambda _: None) -> BuiltImage:
    """Artifacts (reused when recorded for the same image and options), EDF and inventory of
    ``image``, all read from one opened source."""
    seconds: dict[str, float] = {}
    output_dir = options.output_dir.resolve()
    source = open_image(engine, image.ref, options.read)
    lock = prepared.lock
    # One pass over the image's files gives the size table and the SBOM: the squash's
    # stream (which then carries the SBOM too), else an export of its own; dated like the
    # build: the lock's SOURCE_DATE_EPOCH, else the image creation time.
    scan = inventory_scan(prepared.plan, lock.source_date_epoch
                          if lock.source_date_epoch is not None
                          else reproducible_epoch(source.config()))
    artifacts: tuple[Artifact, ...] = ()
    squashed = False
    if options.formats:
        started = time.monotonic()
        artifacts, squashed = _squash(prepared, job, image, source, scan, options, output_dir,
                                      engine.daemon_ref(image.ref), say)
        seconds["squash"] = time.monotonic() - started
    started = time.monotonic()
    inventory = take_inventory(scan, source, output_dir, job.name, image.image_id)
    if inventory.scanned and not squashed:
        seconds["inventory"] = time.monotonic() - started
    return BuiltImage(image, False, artifacts, squashed, inventory, seconds=seconds)


def _squash(prepared: PreparedBuild, job: ImageJob, image: ImageRef, source: ImageSource,
            scan: InventoryScan, options: BuildOptions, output_dir: Path,
            daemon_ref: str | None, say: Say) -> tuple[tuple[Artifact, ...], bool]:
    key = {"image_id": image.image_id, "formats": list(options.formats),
           "compression": str(options.compression),
           "site": options.site.name if options.site else None}
    reused = reusable_artifacts(output_dir, job.name, key)
    if reused is not None:
        say(f"artifacts of {image.image_id[:19]} are up to date in {output_dir}")
        return reused, False
    # Apptainer re-reads the image from the Docker engine by its reference; siftool wraps
    # the .sqsh and records the reference given (a rebuild records its first build's tag).
    artifacts = convert(source, output_dir, job.name, options.formats,
                        compression=options.compression, tool=find_squash_tool(None),
                        sif_method=options.sif_method,
                        image_ref=job.sif_ref or daemon_ref, observer=scan)
    sqsh = next((a for a in artifacts if a.kind == "sqsh"), None)
    if options.site and sqsh is not None:
        recipe = prepared.recipe
        artifacts.append(write_edf_beside(
            sqsh, job.name, options.site, rocm_version=recipe.rocm,
            workdir=source.config().workdir or None, regenerate=job.edf_regenerate,
            network=prepared.plan.image_network))
    write_record(output_dir, job.name, key, artifacts)
    return tuple(artifacts), True


def write_sarus_edf(prepared: PreparedBuild, job: ImageJob, options: BuildOptions,
                    pinned: str, sqsh: Artifact | None) -> Artifact:
    """``<name>.sarus.toml`` in the output directory: the Sarus Suite EDF of the pushed
    image (``pinned``: registry/name@sha256:...)."""
    from imagebuild.render.edf_sarus import render_sarus_edf

    assert options.site is not None
    path = options.output_dir.resolve() / f"{job.name}.sarus.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, render_sarus_edf(
        recipe=job.name, image=pinned, site=options.site, rocm_version=prepared.recipe.rocm,
        network=prepared.plan.image_network,
        workdir=edf_workdir(sqsh.path.with_suffix(".toml")) if sqsh else None))
    return Artifact("sarus-edf", path, path.stat().st_size, sha256_file(path), 0.0)


def _existing_image(engine: Engine, tag: str, build_hash: str) -> ImageRef | None:
    if not engine.image_exists(tag):
        return None
    if engine.image_labels(tag).get(BUILD_HASH_LABEL) != build_hash:
        return None
    return ImageRef(ref=tag, image_id=engine.image_id(tag), tags=(tag,), backend=engine.backend)
