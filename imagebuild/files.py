"""The one way to write a file atomically and to hash bytes, files and data.

Every file imagebuild writes (locks, generated Dockerfiles, EDF and CI files, artifacts and
their sidecars, reports) is written to a hidden temporary name in the same directory and
renamed into place: a reader never sees a half-written file, and Ctrl-C or a full disk
leaves the previous file as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

_READ_CHUNK = 1 << 20


def temporary_name(final: Path) -> Path:
    """A hidden name in the same directory, unique per attempt."""
    return final.with_name(f".{final.name}.partial-{os.getpid()}-{secrets.token_hex(4)}")


def remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_output(final: Path, mode: int = 0o644) -> Iterator[Path]:
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
        os.chmod(temp, mode)
        os.replace(temp, final)
    except BaseException:
        remove_quietly(temp)
        raise
    fsync_dir(final.parent)


def write_text_atomic(final: Path, text: str, mode: int = 0o644) -> None:
    with atomic_output(final, mode) as temp, \
            open(temp, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(text)


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_digest(data: Any) -> str:
    """``sha256:<hex>`` of JSON-able data in canonical form (sorted keys, no spaces): the
    input hash of every generated file and lock."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return "sha256:" + sha256_bytes(canonical.encode())
