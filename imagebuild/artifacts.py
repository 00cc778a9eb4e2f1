"""Publishing artifacts atomically, each with a ``<file>.sha256`` beside it.

An artifact is written under a hidden temporary name in its final directory (same
filesystem, so the final ``rename`` is atomic) and only renamed into place once complete.
Any exception, Ctrl-C included, removes the temporary file: a reader never sees half an
image, and a full disk leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_READ_CHUNK = 1 << 20


@dataclass(frozen=True)
class Artifact:
    """One published file."""

    kind: str  # "sqsh", "sif", "edf"
    path: Path
    size: int
    sha256: str  # hex digest
    seconds: float  # wall time to produce it

    @property
    def sidecar(self) -> Path:
        return sidecar_path(self.path)


def sidecar_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def temporary_name(final: Path) -> Path:
    """A hidden name in the same directory, unique per attempt."""
    return final.with_name(f".{final.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


@contextmanager
def atomic_output(final: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success rename it to ``final``.

    On any exception (``KeyboardInterrupt`` too) the temporary file is removed and the
    exception propagates; an existing ``final`` is left as it was.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    temp = temporary_name(final)
    try:
        yield temp
        if not temp.exists():
            raise FileNotFoundError(f"{temp}: the producer wrote nothing")
        with open(temp, "rb+") as stream:
            os.fsync(stream.fileno())
        os.replace(temp, final)
    except BaseException:
        _remove_quietly(temp)
        raise
    _fsync_dir(final.parent)


def write_text_atomic(final: Path, text: str) -> None:
    with atomic_output(final) as temp:
        temp.write_text(text, encoding="utf-8")


def write_sidecar(path: Path, digest: str) -> Path:
    """``<path>.sha256`` in sha256sum format (``sha256sum -c`` works in that directory)."""
    sidecar = sidecar_path(path)
    write_text_atomic(sidecar, f"{digest}  {path.name}\n")
    return sidecar


def publish(temp: Path, final: Path, kind: str, seconds: float) -> Artifact:
    """Hash a finished temporary file, rename it into place, and write its sidecar.

    The stale sidecar of a previous artifact is removed first, so a crash between the two
    renames never leaves a sidecar that contradicts the file beside it.
    """
    try:
        digest = sha256_file(temp)
        size = temp.stat().st_size
        with open(temp, "rb+") as stream:
            os.fsync(stream.fileno())
        _remove_quietly(sidecar_path(final))
        os.replace(temp, final)
    except BaseException:
        _remove_quietly(temp)
        raise
    _fsync_dir(final.parent)
    write_sidecar(final, digest)
    return Artifact(kind=kind, path=final, size=size, sha256=digest, seconds=seconds)
