"""The tuning bundle on the host: read and match it with errors as TuneError (the format is
imagebuild.inimage.tuning.bundle_format, which images carry), and the digest that names a
bundle in image tags, labels and EDF headers."""

from __future__ import annotations

import hashlib
from pathlib import Path

from imagebuild.inimage.tuning import bundle_format

from .problem import host_errors

__all__ = ["bundle_digest", "bundle_files", "check_match", "read_bundle"]

read_bundle = host_errors(bundle_format.read_bundle)
check_match = host_errors(bundle_format.check_match)


def bundle_files(directory: Path) -> list[Path]:
    """Every regular file of the bundle, sorted; symbolic links and hidden files are not
    part of it (a runtime mount would show them, a derived image would not)."""
    return sorted(p for p in directory.rglob("*")
                  if p.is_file() and not p.is_symlink()
                  and not any(part.startswith(".") for part in p.relative_to(directory).parts))


def bundle_digest(directory: Path) -> str:
    """``sha256:`` over each file's relative path and bytes: the same bundle, the same
    digest, wherever it lies."""
    digest = hashlib.sha256()
    for path in bundle_files(directory):
        digest.update(f"{path.relative_to(directory).as_posix()}\0".encode())
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return "sha256:" + digest.hexdigest()
