"""Is a lock usable for a build: it belongs to the recipe, is current, and every pin has its
strict format (a lock is a file too, and could be edited by hand). The build plan is made
only from a lock that passed here."""

from __future__ import annotations

import re

from imagebuild import components
from imagebuild.errors import LockError, short_path
from imagebuild.lock.lockfile import lock_path, read_lock
from imagebuild.lock.model import (
    ArchivePin,
    GitPin,
    IndexSdist,
    Lock,
    LockedArchive,
    LockedGit,
    Pin,
)
from imagebuild.recipe import grammar
from imagebuild.recipe.model import Recipe

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def current_lock(recipe: Recipe) -> Lock | None:
    """The recipe's lock, None when it was never locked; LockError when it is stale."""
    path = lock_path(recipe)
    if not path.exists():
        return None
    lock = read_lock(path)
    check_lock(recipe, lock)
    return lock


def check_lock(recipe: Recipe, lock: Lock) -> None:
    """The lock belongs to this recipe, is current, and every pin has its strict format."""
    where = short_path(lock.path)
    if lock.recipe != recipe.name:
        raise LockError(f"{where}: lock is for recipe {lock.recipe!r}, not {recipe.name!r}")
    if lock.input_hash != recipe.lock_input_hash():
        raise LockError(f"{where}: stale (recipe {recipe.name} changed since it was locked); "
                        f"run `imagebuild lock {recipe.name}`")
    if not _DIGEST.match(lock.base_digest):
        raise LockError(f"{where}: base-digest {lock.base_digest!r} is not sha256:<64 hex>")
    for wheel in lock.wheels + lock.sdists:  # sdists: archives the image builds
        if not _SHA256.match(wheel.sha256):
            raise LockError(f"{where}: {wheel.name}: sha256 {wheel.sha256!r} is not 64 hex")
        if not wheel.url.startswith(("https://", "http://", "file://")):
            raise LockError(f"{where}: {wheel.name}: url {wheel.url!r} is not http(s)/file")
    for component, section in components.enabled(recipe):
        for pin in component.pins(section, recipe):
            _check_pin(pin, lock, where, recipe.name)


def _check_pin(pin: Pin, lock: Lock, where: str, recipe: str) -> None:
    """What a component asked the lock to pin is there, in its strict format."""
    relock = f"run `imagebuild lock {recipe}`"
    if isinstance(pin, (GitPin, ArchivePin)):
        source = lock.git(pin.key) if isinstance(pin, GitPin) else lock.archive(pin.key)
        if source is None:
            raise LockError(f"{where}: [tool.imagebuild.sources.{pin.key}] missing; {relock}")
        if isinstance(source, LockedGit) and not _COMMIT.match(source.commit):
            raise LockError(f"{where}: {pin.key} commit {source.commit!r} is not 40 hex")
        if isinstance(source, LockedArchive):
            if not _SHA256.match(source.sha256):
                raise LockError(f"{where}: {pin.key} sha256 {source.sha256!r} is not 64 hex")
            if not grammar.matches(grammar.ARCHIVE_URL, source.url):
                raise LockError(f"{where}: {pin.key} url {source.url!r} is not an http(s) URL")
    elif isinstance(pin, IndexSdist):
        built = lock.sdist(pin.name)
        if built is None or built.version != pin.version:
            raise LockError(f"{where}: no {pin.name} {pin.version} source archive; {relock}")
    else:
        for name, version in pin.pins:
            wheel = lock.wheel(name)
            if wheel is None or wheel.version != version:
                raise LockError(f"{where}: no {name} {version} wheel; {relock}")
