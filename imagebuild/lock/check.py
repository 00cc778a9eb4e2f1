"""Is a lock usable for a build: it belongs to the recipe, is current, and every pin has its
strict format (a lock is a file too, and could be edited by hand). The build plan is made
only from a lock that passed here."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from imagebuild.components.transformer_engine.component import TORCH_SDIST as TE_TORCH_SDIST
from imagebuild.errors import LockError
from imagebuild.lock.lockfile import lock_path, read_lock
from imagebuild.lock.model import Lock
from imagebuild.recipe import grammar
from imagebuild.recipe.model import Recipe

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def display(path: Path) -> str:
    """``recipes/rocm-7.0.2.yaml``: parent folder and name, the same on every checkout."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


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
    where = display(lock.path)
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
    def on(name: str) -> bool:
        section = recipe.components.get(name)
        return section is not None and section.enabled

    for key, git, enabled in (("hipblaslt", lock.hipblaslt, on("hipblaslt")),
                              ("network-plugin", lock.network_plugin, on("network_plugin")),
                              ("megatron", lock.megatron, on("megatron")),
                              ("rccl-tests", lock.rccl_tests, on("rccl_tests"))):
        if not enabled:
            continue
        if git is None:
            raise LockError(f"{where}: [tool.imagebuild.sources.{key}] missing; "
                            f"run `imagebuild lock {recipe.name}`")
        if not _COMMIT.match(git.commit):
            raise LockError(f"{where}: {key} commit {git.commit!r} is not 40 hex")
    engine: Any = recipe.components.get("transformer_engine")
    if engine is not None and engine.enabled:
        version = engine.version
        built = lock.sdist(TE_TORCH_SDIST)
        if built is None or built.version != version:
            raise LockError(f"{where}: no {TE_TORCH_SDIST} {version} "
                            f"source archive; run `imagebuild lock {recipe.name}`")
    if on("network_plugin"):
        archive = lock.libfabric
        if archive is None:
            raise LockError(f"{where}: [tool.imagebuild.sources.libfabric] missing; "
                            f"run `imagebuild lock {recipe.name}`")
        if not _SHA256.match(archive.sha256):
            raise LockError(f"{where}: libfabric sha256 {archive.sha256!r} is not 64 hex")
        if not grammar.matches(grammar.ARCHIVE_URL, archive.url):
            raise LockError(f"{where}: libfabric url {archive.url!r} is not an http(s) URL")
