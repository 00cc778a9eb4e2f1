"""Recipe -> Lock: pin every byte a build uses.

- ROCm wheels: the exact file for each pinned version is found in the wheel index listing,
  downloaded once into the shared cache and hashed (repo.radeon.com publishes no hashes).
  Their own METADATA must agree with the other pins (``imagebuild.lock.requires``: a
  torchvision built for another torch is refused, naming both pins) before resolution.
- Everything they depend on: ``uv pip compile`` resolves against PyPI, with the cached ROCm
  wheels handed to it as a local ``--find-links`` directory, and writes a PEP 751 lock; its
  file:// URLs are then rewritten to the index URLs.
- Non-Python pins: the base image digest (registry API), and what each enabled component
  asks for (``imagebuild.components``): the commit of each git source (``git ls-remote``),
  the sha256 of each archive, the index's wheels and source archives it builds.

The lock is written to a temporary file and renamed, so Ctrl-C or a dead server at any point
leaves the previous lock as it was. A wheel whose bytes changed under a pinned hash is an
error, never silently re-pinned.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from imagebuild import components
from imagebuild.errors import HashMismatch, LockError
from imagebuild.generated import GeneratedFile, write_all
from imagebuild.lock.epoch import relock_text
from imagebuild.lock.index import IndexFile, WheelIndex
from imagebuild.lock.lockfile import lock_path, lock_text, read_lock
from imagebuild.lock.model import IndexSdist, IndexWheels, Lock, LockedArchive
from imagebuild.lock.options import LockOptions
from imagebuild.lock.requires import PinnedWheel, check_pins_agree
from imagebuild.lock.sdist import sdist_build_requires, sdist_requires
from imagebuild.lock.sources import pin_sources, resolve_base_digest
from imagebuild.lock.therock import check_devices, check_family, device_extras_of
from imagebuild.lock.uv import pin_wheels, selector_build_requires, uv_compile
from imagebuild.recipe.model import ROCM_SELECTOR, Recipe

if TYPE_CHECKING:
    from imagebuild.lock.cache import CachedFile, DownloadCache

Progress = Callable[[str], None]


def _fetch_verified(cache: DownloadCache, found: IndexFile, pinned: str | None) -> CachedFile:
    """The wheel's bytes, checked against the lock's pin and against the sha256 the index
    publishes (PEP 503 ``#sha256=`` fragment; repo.radeon.com publishes none): a file whose
    bytes disagree with what its own index states is refused, never pinned."""
    published = found.sha256.lower() if found.sha256 else None
    if pinned and published and pinned != published:
        raise HashMismatch(
            f"{found.url}: the index publishes sha256 {published}, the lock pins {pinned}",
            hint="the file was replaced upstream; check with the index's maintainers before "
                 "deleting the lock's pin")
    try:
        return cache.fetch(found.url, expected_sha256=pinned or published)
    except HashMismatch as exc:
        if pinned or not published:
            raise
        raise HashMismatch(f"{found.url}: the downloaded bytes do not match the sha256 "
                           f"{published} the index publishes for them (nothing was cached)",
                           hint="a damaged mirror or proxy; retry, or lock from another "
                                "mirror") from exc


def lock_recipe(recipe: Recipe, options: LockOptions | None = None,
                progress: Progress = lambda _: None) -> Lock:
    """Resolve, pin and write the recipe's lock atomically; returns what it pins."""
    from imagebuild.lock.cache import DownloadCache

    options = options or LockOptions.from_env()
    path = lock_path(recipe)
    previous = _previous_hashes(path)
    cache = DownloadCache(options.cache_dir)
    index_url = (options.index_url or recipe.wheels.index_url).replace(
        "{family}", recipe.gpu_family or "")
    index = WheelIndex(index_url, simple=recipe.rocm_wheels)

    pins = [pin for component, section in components.enabled(recipe)
            for pin in component.pins(section, recipe)]
    index_wheels = tuple(p for pin in pins if isinstance(pin, IndexWheels) for p in pin.pins)
    index_pythons = served_pythons(recipe, index, recipe.wheels.pinned + index_wheels)
    with tempfile.TemporaryDirectory(prefix="imagebuild-lock-") as tmp:
        links = Path(tmp) / "find-links"
        links.mkdir()
        pinned: dict[str, dict[str, Any]] = {}
        downloaded: list[PinnedWheel] = []
        for name, version in recipe.wheels.pinned + index_wheels:
            found = index.find(name, version, python=recipe.python)
            progress(f"wheel {found.filename}")
            known = previous.get(found.filename)
            cached = _fetch_verified(cache, found, known)
            cached.link_into(links, found.filename)
            pinned[canonicalize_name(name)] = {
                "url": found.url, "size": cached.size, "sha256": cached.sha256}
            downloaded.append(PinnedWheel(canonicalize_name(name), version, found.filename,
                                          cached.path))
        check_pins_agree(recipe, downloaded)
        extras = device_extras_of(recipe, downloaded) if recipe.multi_arch else {}
        built, needs = _source_archives([pin for pin in pins if isinstance(pin, IndexSdist)],
                                        index, cache, previous, progress)
        # The components' index wheels and what their source archives need are resolved
        # with the image's own wheels.
        extra = tuple(f"{name}=={version}" for name, version in index_wheels) + needs
        progress("resolving dependencies with uv")
        rocm_index = index_url if recipe.rocm_wheels else None
        compiled = uv_compile(recipe, links, Path(tmp), options, rocm_index=rocm_index,
                               extra=extra, extras=extras)
        if recipe.rocm_wheels:
            build_requires = selector_build_requires(compiled, cache)
            if build_requires:  # the image builds the selector without isolation
                progress(f"resolving the selector's build requirements: "
                         f"{', '.join(build_requires)}")
                compiled = uv_compile(recipe, links, Path(tmp), options,
                                       rocm_index=rocm_index, extra=extra + build_requires,
                                       extras=extras)
    packages = pin_wheels(compiled, pinned, recipe.python,
                           sdist_allowed=(ROCM_SELECTOR,) if recipe.rocm_wheels else ())
    packages = sorted(packages + built, key=lambda p: p["name"])
    if recipe.multi_arch:
        check_devices(recipe, packages)
    elif recipe.rocm_wheels:
        check_family(recipe, packages)
    for package in packages:
        wheel = package["wheels"][0] if "wheels" in package else package["sdist"]
        if wheel.get("size") is None:  # plain PEP 503 mirrors publish no sizes
            wheel["size"] = cache.fetch(wheel["url"],
                                        expected_sha256=wheel["hashes"]["sha256"]).size
    sources = pin_sources(pins, options, cache, previous, progress)
    progress(f"base image digest of {recipe.base_image}")
    base_digest = resolve_base_digest(recipe.base_image)

    def render(epoch: int | None) -> str:
        return lock_text(recipe, packages, base_digest=base_digest, wheel_index=index_url,
                         sources=sources, source_date_epoch=epoch, index_pythons=index_pythons)

    write_all([GeneratedFile(path, relock_text(path, render), f"imagebuild lock {recipe.name}")])
    return read_lock(path)


def served_pythons(recipe: Recipe, index: WheelIndex, pins: tuple[tuple[str, str], ...]
                   ) -> tuple[str, ...]:
    """The Pythons the index has every pinned wheel for (``[tool.imagebuild]
    index-pythons``): AMD's indexes build each release for several (TheRock's for 3.11 to
    3.14), and a recipe per Python is locked against the same index. A recipe whose Python
    is not among them is refused here, naming what the index does serve; a pin with no file
    at all is left to the index's own message (the closest files)."""
    named = {python for name, version in pins for python in index.pythons_for(name, version)}
    candidates = sorted(named | {recipe.python})
    served = {(name, version): index.pythons_for(name, version, candidates)
              for name, version in pins}
    common = [p for p in candidates if all(p in pythons for pythons in served.values())]
    missing = [f"{name}=={version} (for Python {', '.join(pythons)})"
               for (name, version), pythons in served.items()
               if pythons and recipe.python not in pythons]
    if missing:
        raise LockError(
            f"{recipe.name}: python {recipe.python}: {index.url} has no wheel of "
            + "; ".join(missing) + ". The index serves every pin for Python "
            + (", ".join(common) or "none"),
            hint=f"set the recipe's python (and a base image with it) to one of those, or pin "
                 f"versions the index builds for Python {recipe.python}")
    return tuple(common) if named else ()


def _source_archives(sdists: list[IndexSdist], index: WheelIndex, cache: DownloadCache,
                     previous: dict[str, str], progress: Progress
                     ) -> tuple[list[dict[str, Any]], tuple[str, ...]]:
    """The source archives the image builds (TransformerEngine's PyTorch extension) as lock
    entries, and the requirements they add to the resolution: what they require (PKG-INFO)
    and what their build needs (the image builds them without isolation, with what the lock
    installed)."""
    entries: list[dict[str, Any]] = []
    needs: list[str] = []
    for sdist in sdists:
        found = index.find_sdist(sdist.name, sdist.version)
        progress(f"source archive {found.filename}")
        cached = _fetch_verified(cache, found, previous.get(found.filename))
        entries.append({"name": sdist.name, "version": sdist.version,
                        "sdist": {"url": found.url, "size": cached.size,
                                  "hashes": {"sha256": cached.sha256}}})
        own = canonicalize_name(sdist.name)
        needs += [r for r in sdist_requires(cached.path) + sdist_build_requires(cached.path)
                  if canonicalize_name(Requirement(r).name) != own]
    return entries, tuple(needs)


def _previous_hashes(path: Path) -> dict[str, str]:
    """filename -> sha256 pinned by the current lock (to refuse silent re-pinning)."""
    if not path.exists():
        return {}
    try:
        lock = read_lock(path)
    except LockError:
        return {}
    hashes = {w.filename: w.sha256 for w in lock.wheels + lock.sdists}
    for source in lock.sources.values():
        if isinstance(source, LockedArchive):
            hashes[source.url.rsplit("/", 1)[-1]] = source.sha256
    return hashes
