"""The tuning bundle on the host: read, write and match it (the code is
``validate/checks/tune_bundle.py``, which images carry, with its errors raised here as
TuneError), and the digest that names a bundle in image tags, labels and EDF headers."""

from __future__ import annotations

import hashlib
from pathlib import Path

from imagebuild.validate.checks import tune_bundle
from imagebuild.validate.checks.tune_bundle import (
    BUNDLE_FILE,
    DEFAULT_MOUNT_POINT,
    FILE_KINDS,
    FORMAT,
    TUNING_VARIABLES,
    Bundle,
    BundleProblem,
    Target,
    mismatches,
    ordinal_name,
    same_revision,
    tuning_env,
    write_bundle,
)

from .problem import host_errors

__all__ = ["BUNDLE_FILE", "DEFAULT_MOUNT_POINT", "FILE_KINDS", "FORMAT", "TUNING_VARIABLES",
           "Bundle", "BundleProblem", "Target", "bundle_digest", "bundle_files", "check_match",
           "mismatches", "ordinal_name", "read_bundle", "same_revision", "tuning_env",
           "write_bundle"]

read_bundle = host_errors(tune_bundle.read_bundle)
check_match = host_errors(tune_bundle.check_match)


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
