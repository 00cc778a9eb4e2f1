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

import os
import re
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from packaging.requirements import Requirement
from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from imagebuild import components
from imagebuild.errors import CommandFailed, HashMismatch, LockError, SourceError
from imagebuild.generated import GeneratedFile, check, write_all
from imagebuild.lock.epoch import relock_text
from imagebuild.lock.index import IndexFile, WheelIndex, supported_tags
from imagebuild.lock.lockfile import lock_path, lock_text, read_lock
from imagebuild.lock.model import (
    ArchivePin,
    GitPin,
    IndexSdist,
    IndexWheels,
    Lock,
    LockedArchive,
    LockedGit,
    LockedSource,
    Pin,
)
from imagebuild.lock.requires import PinnedWheel, check_pins_agree, provides_extra
from imagebuild.lock.sdist import sdist_build_requires, sdist_requires
from imagebuild.process import DEFAULT_RUNNER, CommandRunner
from imagebuild.recipe.model import ROCM_SELECTOR, Recipe

if TYPE_CHECKING:
    from imagebuild.lock.cache import CachedFile, DownloadCache

#: Ubuntu 24.04 (the ROCm base images) has glibc 2.39; manylinux_2_28 wheels run there, and
#: repo.radeon.com tags its wheels plain linux_x86_64.
TARGET_PLATFORM = "x86_64-manylinux_2_28"
#: TheRock's per-family libraries wheel: rocm-sdk-libraries-<family>.
LIBRARIES_PREFIX = "rocm-sdk-libraries-"
#: A multi-arch index's device packs: the SDK's (rocm-sdk-device-<target>) and a
#: framework's (amd-torch-device-<target>, amd-torchvision-device-<target>).
SDK_DEVICE_PREFIX = "rocm-sdk-device-"
DEVICE_INFIX = "-device-"
WHEEL_PLATFORM = "manylinux_2_28_x86_64"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LockOptions:
    """Per-run overrides for mirrors and air-gapped sites; none of them changes a recipe."""

    #: Wheel index for the pinned ROCm wheels (URL or local directory of wheels).
    index_url: str | None = None
    #: PyPI (or a mirror) for the transitive dependencies; None: uv's default.
    pypi_url: str | None = None
    #: Prefix rewrites for source repositories, e.g. {"https://github.com/": "https://m/"}.
    git_mirrors: Mapping[str, str] = field(default_factory=dict)
    cache_dir: Path | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> LockOptions:
        mirrors = dict(parse_mirrors(os.environ.get("IMAGEBUILD_GIT_MIRRORS", "")))
        mirrors.update(overrides.pop("git_mirrors", None) or {})
        values: dict[str, Any] = {
            "index_url": os.environ.get("IMAGEBUILD_WHEEL_INDEX") or None,
            "pypi_url": os.environ.get("IMAGEBUILD_PYPI_INDEX") or None,
            "cache_dir": Path(os.environ["IMAGEBUILD_CACHE"])
            if os.environ.get("IMAGEBUILD_CACHE") else None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(git_mirrors=mirrors, **values)


def parse_mirrors(text: str) -> list[tuple[str, str]]:
    """``FROM=TO`` pairs separated by ';' or newlines."""
    pairs = []
    for item in filter(None, (part.strip() for part in re.split(r"[;\n]", text))):
        source, sep, target = item.partition("=")
        if not sep or not source or not target:
            raise LockError(f"git mirror {item!r}: expected FROM=TO, e.g. "
                            "https://github.com/=https://git.mirror.example/")
        pairs.append((source, target))
    return pairs


def mirrored(url: str, mirrors: Mapping[str, str]) -> str:
    for source, target in sorted(mirrors.items(), key=lambda kv: -len(kv[0])):
        if url.startswith(source):
            return target + url[len(source):]
    return url


# --- the lock --------------------------------------------------------------------------------

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
        compiled = _uv_compile(recipe, links, Path(tmp), options, rocm_index=rocm_index,
                               extra=extra, extras=extras)
        if recipe.rocm_wheels:
            build_requires = _selector_build_requires(compiled, cache)
            if build_requires:  # the image builds the selector without isolation
                progress(f"resolving the selector's build requirements: "
                         f"{', '.join(build_requires)}")
                compiled = _uv_compile(recipe, links, Path(tmp), options,
                                       rocm_index=rocm_index, extra=extra + build_requires,
                                       extras=extras)
    packages = _pin_wheels(compiled, pinned, recipe.python,
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
    sources = _pin_sources(pins, options, cache, previous, progress)
    progress(f"base image digest of {recipe.base_image}")
    base_digest = resolve_base_digest(recipe.base_image)

    def render(epoch: int | None) -> str:
        return lock_text(recipe, packages, base_digest=base_digest, wheel_index=index_url,
                         sources=sources, source_date_epoch=epoch)

    write_all([GeneratedFile(path, relock_text(path, render), f"imagebuild lock {recipe.name}")])
    return read_lock(path)


def _pin_sources(pins: list[Pin], options: LockOptions, cache: DownloadCache,
                 previous: dict[str, str], progress: Progress) -> dict[str, LockedSource]:
    """The components' git sources (the commit of each ref) and archives (their bytes'
    sha256, checked against the current lock's), by key, in the order pinned."""
    sources: dict[str, LockedSource] = {}
    for pin in pins:
        if isinstance(pin, GitPin):
            progress(f"git ls-remote {pin.source.repository}")
            sources[pin.key] = resolve_git(pin.source.repository, pin.source.ref,
                                           options.git_mirrors)
        elif isinstance(pin, ArchivePin):
            url = mirrored(pin.url, options.git_mirrors)
            progress(f"{pin.key} {url}")
            archive = cache.fetch(url, expected_sha256=previous.get(url.rsplit("/", 1)[-1]))
            sources[pin.key] = LockedArchive(url=url, sha256=archive.sha256, size=archive.size)
    return sources


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


def _uv_compile(recipe: Recipe, links: Path, tmp: Path, options: LockOptions,
                runner: CommandRunner = DEFAULT_RUNNER, *, rocm_index: str | None = None,
                extra: tuple[str, ...] = (),
                extras: Mapping[str, tuple[str, ...]] | None = None) -> dict[str, Any]:
    """``rocm_index``: ROCm from wheels, the TheRock PEP 503 index. uv asks an extra index
    before the main one and takes each project from the first index that has it (its
    "first-index" strategy), so torch and the rocm-sdk wheels come from the ROCm index and
    nothing of the same name from PyPI can replace them. ``extras``: pinned project -> the
    device extras it is resolved with (multi-arch index: ``torch[device-gfx942]==...``)."""
    extras = extras or {}
    lines = [f"{name}[{','.join(extras[name])}]=={version}" if extras.get(name)
             else f"{name}=={version}" for name, version in recipe.wheels.pinned]
    lines += list(recipe.wheels.extra) + list(extra)
    if rocm_index:
        # torch requires rocm[libraries]==<its SDK>; this pins the SDK the recipe names, so a
        # torch built against another one fails resolution instead of pulling that one. On a
        # multi-arch index the selector's device extras add the SDK's device packs.
        selector_extras = ",".join(("libraries", *recipe.device_extras))
        lines.append(f"{ROCM_SELECTOR}[{selector_extras}]=={recipe.rocm}")
    requirements = tmp / "requirements.in"
    requirements.write_text("\n".join(lines) + "\n")
    output = tmp / "pylock.toml"
    command = [
        uv_binary(), "pip", "compile", str(requirements),
        "--find-links", str(links),
        "--python-version", recipe.python,
        "--python-platform", TARGET_PLATFORM,
        "--only-binary", ":all:",  # an image build never compiles a Python package ...
        "--generate-hashes", "--format", "pylock.toml", "--no-header",
        "--output-file", str(output), "--quiet",
        # A temporary cache, dropped when uv exits: uv unpacks every --find-links wheel into
        # its cache keyed by path, and these wheels sit in a new temporary directory each
        # lock, so its own cache would gain another unpacked torch (GBs for ROCm builds) on
        # every lock, never reused. imagebuild's download cache keeps the wheels themselves.
        "--no-cache",
    ]
    if rocm_index:
        # ... but the ROCm selector, an sdist whose build picks the family's libraries
        # (TheRock docs/packaging/python_packaging.md): pure Python, built here for its
        # metadata and in the image by its own backend.
        # uv caches an sdist's built metadata by URL, blind to ROCM_SDK_TARGET_FAMILY: a
        # cache filled for one family would answer for another, so it is rebuilt each time.
        command += ["--no-binary", ROCM_SELECTOR, "--refresh-package", ROCM_SELECTOR,
                    "--extra-index-url", rocm_index]
    if options.pypi_url:
        command += ["--index-url", options.pypi_url]
    # Resolution needs no interpreter of the target version (wheels only, metadata from the
    # index), so uv must not try to download one: that stalls for seconds offline.
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never"}
    if recipe.gpu_family:
        # The selector's build reads the family from here before probing for a GPU.
        env["ROCM_SDK_TARGET_FAMILY"] = recipe.gpu_family
    try:
        result = runner.capture(command, step="uv pip compile", env=env, timeout=1800,
                                check=False)
    except CommandFailed:  # with check=False, only the timeout raises
        raise LockError(f"{recipe.name}: dependency resolution (uv pip compile) timed out "
                        "after 30 minutes") from None
    if result.returncode != 0:
        detail = "\n".join(line for line in result.stderr.strip().splitlines()[-15:])
        raise LockError(f"{recipe.name}: could not resolve the Python environment "
                        f"(uv pip compile, recipe key wheels):\n{detail}")
    return tomllib.loads(output.read_text())


def uv_binary() -> str:
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return "uv"


def _pin_wheels(compiled: dict[str, Any], pinned: dict[str, dict[str, Any]],
                python: str, sdist_allowed: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One wheel per package: the index file for pinned wheels, the best-matching PyPI wheel
    for the rest. sdists are dropped (the image installs wheels only), except the projects
    of ``sdist_allowed`` that publish nothing else (the ROCm selector)."""
    ranking = {tag: rank for rank, tag in enumerate(supported_tags(python, WHEEL_PLATFORM))}
    packages = []
    for package in compiled.get("packages", []):
        name = canonicalize_name(package["name"])
        entry: dict[str, Any] = {"name": name, "version": package["version"]}
        if "marker" in package:
            entry["marker"] = package["marker"]
        if name in pinned:
            wheel = {"url": pinned[name]["url"], "size": pinned[name]["size"],
                     "hashes": {"sha256": pinned[name]["sha256"]}}
        elif name in sdist_allowed and not package.get("wheels") and "sdist" in package:
            sdist = package["sdist"]
            if "sha256" not in sdist.get("hashes", {}):
                raise LockError(f"{name}: the index published no sha256 for {sdist['url']}")
            entry["sdist"] = {"url": sdist["url"], "size": sdist.get("size"),
                              "hashes": {"sha256": sdist["hashes"]["sha256"]}}
            packages.append(entry)
            continue
        else:
            wheel = _best_wheel(name, package.get("wheels", []), ranking)
        entry["wheels"] = [wheel]
        packages.append(entry)
    return sorted(packages, key=lambda p: p["name"])


def _best_wheel(name: str, wheels: list[dict[str, Any]], ranking: dict[Tag, int]
                ) -> dict[str, Any]:
    best: tuple[int, dict[str, Any]] | None = None
    for wheel in wheels:
        # Index links quote the local version's "+" (%2B), as AMD's indexes do.
        filename = unquote(wheel["url"].rsplit("/", 1)[-1])
        try:
            tags = parse_wheel_filename(filename)[3]
        except ValueError:
            continue
        rank = min((ranking[t] for t in tags if t in ranking), default=None)
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, wheel)
    if best is None:
        raise LockError(f"{name}: no wheel fits the image's Python and platform "
                        f"({TARGET_PLATFORM}); images install wheels only, never sdists")
    wheel = best[1]
    if "sha256" not in wheel.get("hashes", {}):
        raise LockError(f"{name}: the index published no sha256 for {wheel['url']}")
    return {"url": wheel["url"], "size": wheel.get("size"),
            "hashes": {"sha256": wheel["hashes"]["sha256"]}}


def check_family(recipe: Recipe, packages: list[dict[str, Any]]) -> None:
    """The resolved ROCm libraries are the family of the recipe's targets, and only it: a
    selector that ignored ROCM_SDK_TARGET_FAMILY (or an index of another family) would
    otherwise give an image without device code for its GPUs."""
    wanted = canonicalize_name(f"{LIBRARIES_PREFIX}{recipe.gpu_family}")
    found = sorted(p["name"] for p in packages if p["name"].startswith(LIBRARIES_PREFIX))
    names = {p["name"] for p in packages}
    if found != [wanted] or ROCM_SELECTOR not in names:
        raise LockError(
            f"{recipe.name}: gpu_targets {', '.join(recipe.gpu_targets)} need {wanted} from "
            f"the {recipe.gpu_family} index, the resolution gave "
            f"{', '.join(found) or 'no ROCm libraries'}"
            + ("" if ROCM_SELECTOR in names else f" and no {ROCM_SELECTOR} selector"),
            hint=f"check wheels.index_url ({recipe.wheels.index_url}) serves that family")


def device_extras_of(recipe: Recipe, wheels: list[PinnedWheel]
                     ) -> dict[str, tuple[str, ...]]:
    """Pinned project -> the recipe's device extras, for each pinned wheel that provides
    device extras (torch, torchvision); torch must provide one for every target."""
    extras: dict[str, tuple[str, ...]] = {}
    for wheel in wheels:
        offered = sorted(e for e in provides_extra(wheel) if e.startswith("device-"))
        if not offered:
            if wheel.name == "torch":
                raise LockError(
                    f"{recipe.name}: {wheel.filename} provides no device extras, so "
                    f"{recipe.wheels.index_url} is not a multi-arch index",
                    hint="for a legacy per-family index write {family} in wheels.index_url, "
                         "e.g. https://repo.amd.com/rocm/whl/{family}/")
            continue
        missing = [e for e in recipe.device_extras if e not in offered]
        if missing:
            raise LockError(
                f"{recipe.name}: {wheel.filename} provides no {', '.join(missing)} extra "
                f"(it provides {', '.join(offered)})",
                hint="this release has no device code for that target: remove it from "
                     "gpu_targets, or pin a release that builds it")
        extras[wheel.name] = recipe.device_extras
    return extras


def check_devices(recipe: Recipe, packages: list[dict[str, Any]]) -> None:
    """A multi-arch resolution holds the SDK's device pack of every target, and device packs
    of the recipe's targets only: another target's would be code the GPUs never run."""
    wanted = {extra.removeprefix("device-") for extra in recipe.device_extras}
    names = {p["name"] for p in packages}
    devices = {name: name.rsplit(DEVICE_INFIX, 1)[1] for name in names
               if DEVICE_INFIX in name}
    missing = sorted(f"{SDK_DEVICE_PREFIX}{t}" for t in wanted
                     if f"{SDK_DEVICE_PREFIX}{t}" not in names)
    others = sorted(name for name, target in devices.items() if target not in wanted)
    family = sorted(name for name in names if name.startswith(LIBRARIES_PREFIX))
    if missing or others or family or ROCM_SELECTOR not in names:
        found = [f"missing {', '.join(missing)}" if missing else "",
                 f"device code for other targets: {', '.join(others)}" if others else "",
                 f"per-family libraries {', '.join(family)}" if family else "",
                 "" if ROCM_SELECTOR in names else f"no {ROCM_SELECTOR} selector"]
        raise LockError(
            f"{recipe.name}: gpu_targets {', '.join(recipe.gpu_targets)} need the device "
            f"packs {', '.join(sorted(f'{SDK_DEVICE_PREFIX}{t}' for t in wanted))} from the "
            f"multi-arch index; the resolution gave {'; '.join(f for f in found if f)}",
            hint=f"check wheels.index_url ({recipe.wheels.index_url}) is a multi-arch index")


def _selector_build_requires(compiled: dict[str, Any], cache: DownloadCache
                             ) -> tuple[str, ...]:
    """``[build-system] requires`` of the selector sdist: the image builds it without
    isolation (no index at install time), so they must be pinned in the lock too."""
    for package in compiled.get("packages", []):
        if canonicalize_name(package["name"]) != ROCM_SELECTOR or "sdist" not in package:
            continue
        sdist = package["sdist"]
        cached = cache.fetch(sdist["url"], expected_sha256=sdist["hashes"]["sha256"])
        return sdist_build_requires(cached.path)
    return ()


def resolve_git(repository: str, ref: str, mirrors: Mapping[str, str],
                runner: CommandRunner = DEFAULT_RUNNER) -> LockedGit:
    url = mirrored(repository, mirrors)
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return LockedGit(repository=url, ref=ref, commit=ref)
    try:
        result = runner.capture(["git", "ls-remote", "--", url, ref, f"{ref}^{{}}"],
                                step="git ls-remote", timeout=120, check=False,
                                env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except CommandFailed:  # with check=False, only the timeout raises
        raise SourceError(f"git ls-remote {url} {ref}: timed out after 120 s") from None
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SourceError(f"git ls-remote {url}: failed: {detail[0]}")
    refs: dict[str, str] = {}
    for line in result.stdout.splitlines():
        commit, _, name = line.partition("\t")
        refs[name] = commit
    # An annotated tag's peeled entry (^{}) names the commit; prefer it over the tag object.
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        if name in refs:
            return LockedGit(repository=url, ref=ref, commit=refs[name])
    raise SourceError(f"{url}: no branch or tag named {ref!r}")


def resolve_base_digest(reference: str) -> str:
    if "@sha256:" in reference:
        return reference.split("@", 1)[1]
    from imagebuild.lock.registry import resolve_image_digest

    return resolve_image_digest(reference)


# --- checking -----------------------------------------------------------------------------

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
