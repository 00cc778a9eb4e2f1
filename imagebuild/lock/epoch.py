"""One SOURCE_DATE_EPOCH per recipe and lock: the time the lock was written.

SOURCE_DATE_EPOCH (https://reproducible-builds.org/specs/source-date-epoch/) is "the last
modification of something in the source"; for an image, the lock is that source: it pins
the base image digest and every wheel and commit. Recording the moment of locking in the
lock (``[tool.imagebuild] source-date-epoch``) gives one value that every build of that
recipe and lock shares, without the wall clock of the build. Why that time and not, say, a
number derived from the lock's hash: it is not earlier than any pinned input (each existed
when it was pinned), so clamping mtimes to it (``min(mtime, epoch)``, as
imagebuild.convert.tarfilter does and as ``tar --clamp-mtime`` and BuildKit's
rewrite-timestamp do) changes only the files the build itself writes, and keeps the input
files' own times, which the base image's timestamp-based .pyc files are checked against
(PEP 552). A hash-derived date would be arbitrary, earlier than most inputs, and would
invalidate those .pyc files.

Re-locking to the same pins keeps the recorded time (``relock_text``), so ``imagebuild
lock`` stays idempotent and so do the images. "The same pins" is the same lock document,
whatever order its tables list their keys in: a lock written by an imagebuild that listed
the same sources in another order keeps its time.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

from imagebuild.errors import LockError
from imagebuild.lock.lockfile import read_lock

#: Image label carrying the epoch (rendered into the Dockerfile's LABELs), so that
#: ``imagebuild squash IMAGE`` finds it without the recipe.
EPOCH_LABEL = "imagebuild.source-date-epoch"
#: The BuildKit build arg (honoured by BuildKit >= 0.11 for the image config and history
#: times; docker/buildkit docs/build-repro.md); older builders ignore it.
EPOCH_BUILD_ARG = "SOURCE_DATE_EPOCH"


def relock_text(path: Path, render: Callable[[int | None], str]) -> str:
    """The lock text to write at ``path``: ``render(epoch)`` with the current lock's epoch
    when nothing else changed, else ``render(None)`` (now)."""
    try:
        previous = read_lock(path).source_date_epoch if path.exists() else None
        current = path.read_text(encoding="utf-8") if previous is not None else None
    except (LockError, OSError):
        previous = current = None
    if previous is not None and current is not None:
        kept = render(previous)
        if _same_document(kept, current):
            return kept
    return render(None)


def _same_document(new: str, old: str) -> bool:
    """The same header comment and the same TOML data (tables compared as mappings)."""
    if new == old:
        return True
    header = [line for line in new.splitlines() if line.startswith("#")]
    if header != [line for line in old.splitlines() if line.startswith("#")]:
        return False
    try:
        return tomllib.loads(new) == tomllib.loads(old)
    except tomllib.TOMLDecodeError:
        return False
