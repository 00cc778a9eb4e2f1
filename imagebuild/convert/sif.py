"""Apptainer's Singularity Image Format (.sif) from the built image.

Two ways, chosen by ``choose_method``:

- ``apptainer build x.sif docker-daemon://ref`` when Apptainer is installed (its own
  export and mksquashfs);
- otherwise Debian's ``siftool``, wrapping the squashfs that ``imagebuild.convert.squashfs``
  made: that squashfs already holds /.singularity.d as Apptainer writes it
  (``imagebuild.convert.runtime_files.apptainer_entries``), so the partition is the very
  bytes of the .sqsh. ``siftool new`` + ``siftool add --datatype 4 --parttype 2 --partfs 1
  --partarch <arch>`` (primary system partition, squashfs), then the image config as an
  ``oci-config.json`` generic-JSON object as Apptainer adds it, and the launch line
  ``#!/usr/bin/env run-singularity`` that siftool leaves out (so ``./x.sif`` runs like an
  Apptainer-built image).
"""

from __future__ import annotations

import json
import shutil
import struct
import time
import uuid
from pathlib import Path

from imagebuild.convert import sif_layout as layout
from imagebuild.convert.artifacts import Artifact, publish
from imagebuild.convert.sources import ImageConfig
from imagebuild.convert.squashfs import reproducible_epoch
from imagebuild.errors import EngineError, SquashError
from imagebuild.files import sha256_file, temporary_name
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

#: SIF global header: the first 32 bytes are a launch script ("#!/usr/bin/env
#: run-singularity\n" in sylabs/sif OptCreateWithLaunchScript); siftool writes zeros.
LAUNCH_SCRIPT = b"#!/usr/bin/env run-singularity\n"

#: siftool --partarch numbers (siftool add --help) by OCI architecture name.
_PARTARCH = {"386": 1, "amd64": 2, "arm": 3, "arm64": 4, "ppc64": 5, "ppc64le": 6,
             "mips": 7, "mipsle": 8, "mips64": 9, "mips64le": 10, "s390x": 11, "riscv64": 12}



# --- building the .sif ------------------------------------------------------------------------

def choose_method(method: str, image_ref: str | None,
                  which=shutil.which) -> str:  # type: ignore[no-untyped-def]
    """``auto``: apptainer when installed and the image is in a Docker engine, else siftool."""
    if method not in ("auto", "apptainer", "siftool"):
        raise SquashError(f"--sif-method: expected auto, apptainer or siftool, got {method!r}")
    if method == "apptainer" or (method == "auto" and image_ref and which("apptainer")):
        if not which("apptainer"):
            raise SquashError("sif: apptainer not found on PATH",
                              hint="install Apptainer, or use --sif-method siftool")
        if not image_ref:
            raise SquashError("sif: apptainer builds from a Docker engine image reference")
        return "apptainer"
    if not which("siftool"):
        raise SquashError("sif: neither apptainer nor siftool found on PATH",
                          hint="install Debian's siftool package or Apptainer")
    return "siftool"


def _run(argv: list[str], step: str, runner: CommandRunner) -> str:
    try:
        result = runner.capture(argv, step=step, check=False)
    except (EngineError, OSError) as exc:
        cause = exc.__cause__ if isinstance(exc, EngineError) else exc
        reason = getattr(cause, "strerror", None) or str(exc)
        raise SquashError(f"sif: {step}: cannot run {argv[0]}: {reason}") from exc
    if result.returncode != 0:
        said = (result.stderr or result.stdout).strip()
        raise SquashError(f"sif: {step} failed (exit status {result.returncode}); nothing was "
                          f"kept" + (f"\n{said}" if said else ""))
    return result.stdout


def write_launch_script(sif_path: Path) -> None:
    with open(sif_path, "r+b") as stream:
        header = stream.read(layout.LAUNCH_FIELD + len(layout.MAGIC))
        if not layout.has_magic(header):
            raise SquashError(f"sif: {sif_path.name}: no SIF magic at offset "
                              f"{layout.LAUNCH_FIELD}")
        if header[:layout.LAUNCH_FIELD].strip(b"\0"):
            return  # a launch script is there already
        stream.seek(0)
        stream.write(LAUNCH_SCRIPT.ljust(layout.LAUNCH_FIELD, b"\0"))


def wrap_squashfs(squashfs: Path, output: Path, config: ImageConfig, *,
                  image_ref: str | None = None, siftool: str = "siftool",
                  extra_seconds: float = 0.0, epoch: int | None = None,
                  partition_sha256: str | None = None,
                  runner: CommandRunner = DEFAULT_RUNNER) -> Artifact:
    """A .sif with ``squashfs`` as its primary system partition, published atomically.

    Objects in Apptainer's order (internal/pkg/build/assemblers/sif.go createSIF): the
    definition file, the JSON objects (oci-config.json), then the partition; all in object
    group 1, the default group of apptainer/sif v2. Reproducible: see ``make_deterministic``
    (``epoch`` defaults to the squash's, ``reproducible_epoch``).
    """
    started = time.monotonic()
    arch = _PARTARCH.get(config.architecture)
    if arch is None:
        raise SquashError(f"sif: image architecture {config.architecture!r} has no SIF code")
    temp = temporary_name(output)
    staged: list[Path] = []

    def stage(name: str, text: str) -> Path:
        path = temporary_name(output.with_name(name))
        staged.append(path)
        path.write_text(text, encoding="utf-8")
        return path

    try:
        _run([siftool, "new", str(temp)], "siftool new", runner)
        write_launch_script(temp)
        if image_ref:
            deffile = stage("deffile", f"bootstrap: docker-daemon\nfrom: {image_ref}\n")
            _run([siftool, "add", "--datatype", "1", "--groupid", "1", "--filename", "deffile",
                  str(temp), str(deffile)], "siftool add (definition file)", runner)
        if config.raw:
            # Apptainer keeps the image config as "oci-config.json" (SIFDescOCIConfigJSON).
            oci = stage("oci-config.json", json.dumps(dict(config.raw), sort_keys=True))
            _run([siftool, "add", "--datatype", "6", "--groupid", "1",
                  "--filename", "oci-config.json", str(temp), str(oci)],
                 "siftool add (oci-config.json)", runner)
        _run([siftool, "add", "--datatype", "4", "--parttype", "2", "--partfs", "1",
              "--partarch", str(arch), "--groupid", "1", str(temp), str(squashfs)],
             "siftool add (primary system partition)", runner)
        make_deterministic(temp, reproducible_epoch(config) if epoch is None else epoch,
                           partition_sha256 or sha256_file(squashfs))
        return publish(temp, output, "sif", time.monotonic() - started + extra_seconds)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    finally:
        for path in staged:
            path.unlink(missing_ok=True)


#: Namespace of the SIF image IDs derived from content (uuid5, RFC 9562 section 5.5).
_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/sylabs/sif#imagebuild")


def make_deterministic(sif_path: Path, epoch: int, partition_sha256: str) -> None:
    """Give a siftool-made SIF the same bytes for the same content.

    siftool 2.8 stamps a random image ID and the wall clock into the header and every
    descriptor, and has no option against it (the library's OptCreateWithID and
    OptCreateWithTime are not exposed). Like those options, this sets the ID to one
    derived from the partition's sha256 and every time to ``epoch``.
    """
    image_id = uuid.uuid5(_ID_NAMESPACE, f"sha256:{partition_sha256}").bytes
    times = struct.pack("<qq", epoch, epoch)
    with open(sif_path, "r+b") as stream:
        total, offset = layout.descriptor_table(stream, f"sif: {sif_path.name}")
        stream.seek(layout.HEADER_ID)
        stream.write(image_id + times)
        for index in range(total):
            start = offset + index * layout.DESCRIPTOR_SIZE
            stream.seek(start + layout.DESCRIPTOR_USED)
            if stream.read(1) != b"\x00":
                stream.seek(start + layout.DESCRIPTOR_TIMES)
                stream.write(times)


def apptainer_build(image_ref: str, output: Path, apptainer: str = "apptainer",
                    runner: CommandRunner = DEFAULT_RUNNER) -> Artifact:
    """``apptainer build`` from the Docker engine, published atomically."""
    started = time.monotonic()
    temp = temporary_name(output)
    try:
        _run([apptainer, "build", "--force", str(temp), f"docker-daemon://{image_ref}"],
             "apptainer build", runner)
        return publish(temp, output, "sif", time.monotonic() - started)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
