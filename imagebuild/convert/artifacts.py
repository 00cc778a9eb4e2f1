"""Artifacts beside a squashfs: each file with its ``.sha256``, the EDF, and the record that
lets a rebuild of the same image reuse them.

An artifact is written under a hidden temporary name in its final directory (same
filesystem, so the final ``rename`` is atomic) and only renamed into place once complete.
Any exception, Ctrl-C included, removes the temporary file: a reader never sees half an
image, and a full disk leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.convert.timings import SquashTimings
from imagebuild.files import fsync_dir, remove_quietly, sha256_file, write_text_atomic

if TYPE_CHECKING:
    from imagebuild.recipe.image_network import ImageNetwork
    from imagebuild.recipe.site import SiteProfile
    from imagebuild.tune.apply import RuntimeTuning


@dataclass(frozen=True)
class Artifact:
    """One published file."""

    kind: str  # "sqsh", "sif", "edf"
    path: Path
    size: int
    sha256: str  # hex digest
    seconds: float  # wall time to produce it
    #: where a squash's seconds went (imagebuild.convert.timings); None for other kinds
    timings: SquashTimings | None = None

    @property
    def sidecar(self) -> Path:
        return sidecar_path(self.path)


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def write_sidecar(path: Path, digest: str) -> Path:
    """``<path>.sha256`` in sha256sum format (``sha256sum -c`` works in that directory)."""
    sidecar = sidecar_path(path)
    write_text_atomic(sidecar, f"{digest}  {path.name}\n")
    return sidecar


@contextmanager
def flushing(temp: Path, every_s: float = 0.5) -> Iterator[None]:
    """While another process writes ``temp``, push its pages to the disk as they come
    (fdatasync every ``every_s``), so the fsync that ``publish`` owes before the rename
    finds little left: the disk writes while the CPU compresses, not after (0.8 to 1.0 s of
    a 268 MiB squash here, hash included, without it; 0.2 to 0.3 s with it)."""
    stop = threading.Event()

    def flush() -> None:
        fd = None
        try:
            while not stop.wait(every_s):
                if fd is None:
                    try:
                        fd = os.open(temp, os.O_RDONLY)
                    except FileNotFoundError:
                        continue  # the writer has not created it yet
                os.fdatasync(fd)
        except OSError:
            pass  # the writer reports its own errors; publish's fsync is the one that counts
        finally:
            if fd is not None:
                os.close(fd)

    flusher = threading.Thread(target=flush, name="imagebuild-flush", daemon=True)
    flusher.start()
    try:
        yield
    finally:
        stop.set()
        flusher.join()


def publish(temp: Path, final: Path, kind: str, seconds: float) -> Artifact:
    """Hash a finished temporary file, rename it into place, and write its sidecar.

    The stale sidecar of a previous artifact is removed first, so a crash between the two
    renames never leaves a sidecar that contradicts the file beside it.
    """
    try:
        with open(temp, "rb+") as stream, ThreadPoolExecutor(max_workers=1) as pool:
            # The disk flush waits on the device, the hash on the CPU: side by side they
            # take the longer of the two (0.6 s and 0.3 s for a 268 MiB image here).
            flushed = pool.submit(os.fsync, stream.fileno())
            digest = sha256_file(temp)
            flushed.result()
        size = temp.stat().st_size
        remove_quietly(sidecar_path(final))
        os.replace(temp, final)
    except BaseException:
        remove_quietly(temp)
        raise
    fsync_dir(final.parent)
    write_sidecar(final, digest)
    return Artifact(kind=kind, path=final, size=size, sha256=digest, seconds=seconds)


def write_edf_beside(sqsh: Artifact, name: str, site: SiteProfile, *,
                     rocm_version: str | None, workdir: str | None,
                     tuning: RuntimeTuning | None = None, regenerate: str | None = None,
                     network: ImageNetwork | None = None) -> Artifact:
    """``<name>.toml`` beside the .sqsh: the site's EDF pointing at it, with its sha256
    (and, with ``tuning``, a tuning bundle's mount and variables; ``network``: what the
    image carries for RCCL's network, so the EDF names no network it cannot load).

    This EDF records one image's sha256; the committed, image-independent ``envs/<recipe>.toml``
    comes from ``imagebuild render``.
    """
    from imagebuild.render import edf  # the EDF renderer: only when an EDF is written

    path = sqsh.path.parent / f"{name}.toml"
    write_text_atomic(path, edf.render_edf(
        recipe=name, image=edf.edf_image_path(site, sqsh.path), site=site,
        rocm_version=rocm_version, workdir=workdir, image_sha256=sqsh.sha256,
        regenerate=regenerate, tuning=tuning, network=network))
    return Artifact("edf", path, path.stat().st_size, sha256_file(path), 0.0)


def existing_artifact(path: Path, kind: str) -> Artifact:
    """An artifact already on disk: its sha256 from the sidecar beside it when that names
    this file, else hashed now."""
    sidecar = sidecar_path(path)
    digest = None
    try:
        recorded, _, name = sidecar.read_text().strip().partition("  ")
        digest = recorded if name == path.name and len(recorded) == 64 else None
    except OSError:
        pass
    return Artifact(kind, path, path.stat().st_size, digest or sha256_file(path), 0.0)


# --- reusing the artifacts of the same image ------------------------------------------------

def record_path(output_dir: Path, name: str) -> Path:
    return output_dir / f"{name}.artifacts.json"


def write_record(output_dir: Path, name: str, key: Mapping[str, Any],
                 artifacts: Sequence[Artifact]) -> None:
    """Record which image and options (``key``: image id, formats, compression, site) made
    ``artifacts``, for ``reusable_artifacts``, and when: the wall time belongs here, beside
    the artifacts, never inside them (they are reproducible: imagebuild.lock.epoch)."""
    written = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017
    write_text_atomic(record_path(output_dir, name), json.dumps({
        **key,
        "written": written,
        "artifacts": [{"kind": a.kind, "path": a.path.name, "sha256": a.sha256,
                       "size": a.size, "seconds": round(a.seconds, 2),
                       **({"timings": a.timings.as_dict()} if a.timings else {})}
                      for a in artifacts],
    }, indent=2) + "\n")


def reusable_artifacts(output_dir: Path, name: str, key: Mapping[str, Any]
                       ) -> tuple[Artifact, ...] | None:
    """The recorded artifacts, if they came from the same ``key`` (image and options) and
    their files are still intact (size and sha256 sidecar)."""
    path_of_record = record_path(output_dir, name)
    try:
        record = json.loads(path_of_record.read_text())
    except (OSError, ValueError):
        return None
    if any(record.get(field) != value for field, value in key.items()):
        return None
    artifacts = []
    for entry in record.get("artifacts", []):
        path = path_of_record.parent / entry["path"]
        sidecar = sidecar_path(path)
        if not path.is_file() or path.stat().st_size != entry["size"]:
            return None
        if entry["kind"] != "edf" and (not sidecar.is_file()
                                       or not sidecar.read_text().startswith(entry["sha256"])):
            return None
        artifacts.append(Artifact(entry["kind"], path, entry["size"], entry["sha256"],
                                  entry["seconds"]))
    return tuple(artifacts)
