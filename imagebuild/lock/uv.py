"""The Python environment's resolution: ``uv pip compile`` against PyPI with the pinned
wheels as local files (and, for ROCm from wheels, TheRock's index first), then one wheel per
package, the one that fits the image's Python and platform best."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from packaging.tags import Tag
from packaging.utils import canonicalize_name, parse_wheel_filename

from imagebuild.errors import CommandFailed, LockError
from imagebuild.lock.index import supported_tags
from imagebuild.lock.options import LockOptions
from imagebuild.lock.sdist import sdist_build_requires
from imagebuild.process import DEFAULT_RUNNER, CommandRunner
from imagebuild.recipe.model import ROCM_SELECTOR, Recipe

if TYPE_CHECKING:
    from imagebuild.lock.cache import DownloadCache

#: Ubuntu 24.04 (the ROCm base images) has glibc 2.39; manylinux_2_28 wheels run there, and
#: repo.radeon.com tags its wheels plain linux_x86_64.
TARGET_PLATFORM = "x86_64-manylinux_2_28"
WHEEL_PLATFORM = "manylinux_2_28_x86_64"


def uv_compile(recipe: Recipe, links: Path, tmp: Path, options: LockOptions,
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


def pin_wheels(compiled: dict[str, Any], pinned: dict[str, dict[str, Any]],
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


def selector_build_requires(compiled: dict[str, Any], cache: DownloadCache
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
