"""Is each recipe's lock current, offline: what ``imagebuild lock --check`` and the listings
say about it (a lock's bytes come from the network: offline, only what it records is
checked)."""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.errors import LockError
from imagebuild.generated import check
from imagebuild.lock.lockfile import lock_path, read_lock
from imagebuild.recipe.model import Recipe


@dataclass(frozen=True)
class LockStatus:
    recipe: str
    state: str  # "locked", "stale", "unlocked", "broken"
    detail: str = ""


def lock_status(recipe: Recipe) -> LockStatus:
    path = lock_path(recipe)
    if not path.exists():
        return LockStatus(recipe.name, "unlocked", f"{path.name} does not exist")
    try:
        lock = read_lock(path)
    except LockError as exc:
        return LockStatus(recipe.name, "broken", str(exc))
    if lock.input_hash != recipe.lock_input_hash():
        return LockStatus(recipe.name, "stale",
                          f"{path.name} was locked from other inputs than "
                          f"recipes/{recipe.path.name} now has")
    return LockStatus(recipe.name, "locked", path.name)


def check_locks(recipes: list[Recipe], strict: bool = False) -> list[LockStatus]:
    """Offline check; raises StaleFile naming every stale/broken lock (and unlocked, if
    strict). Returns the statuses for the caller to report."""
    statuses = [lock_status(r) for r in recipes]
    fatal = {"stale", "broken"} | ({"unlocked"} if strict else set())
    bad = [s for s in statuses if s.state in fatal]
    # A lock's bytes come from the network: offline, only what it records is checked.
    check([], also=[f"recipes/pylock.{s.recipe}.toml: {s.state}: {s.detail}; "
                    f"run `imagebuild lock {s.recipe}`" for s in bad])
    return statuses
