"""A plan -> the build context: the Dockerfile and every file it COPYs or mounts (the
wheels-only lock, the manifest, the in-image checks, the ``imagebuild`` shim, and each
enabled component's files and build-time scripts), staged in a directory."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from imagebuild import __version__
from imagebuild.errors import LockError, RenderError
from imagebuild.render.dockerfile import render_dockerfile
from imagebuild.render.layout import (
    CHECKS_IMPORT_NAME,
    CHECKS_SOURCE,
    DEVICE_CODE_CHECK,
    FETCH_UV,
    SCRIPT_HELPERS,
    SCRIPTS,
    SELECTOR_FILE,
    SHIM_COMMAND,
)
from imagebuild.render.manifest import manifest
from imagebuild.render.plan import BuildPlan, device_code_diet
from imagebuild.render.python_files import python_lock, selector_requirement

#: File in a staged context directory that marks it as ours (safe to clear and restage).
CONTEXT_MARKER = ".imagebuild-context"


@dataclass(frozen=True)
class BuildContext:
    """A staged build context: the Dockerfile and every file it COPYs or mounts."""

    directory: Path
    dockerfile: Path
    #: Context-relative paths of the staged files, sorted.
    files: tuple[str, ...]


def build_context(plan: BuildPlan, dest_dir: Path, checks_source: Path | None = None, *,
                  dockerfile: str | None = None) -> BuildContext:
    """Stage the Dockerfile and everything it uses from its context into ``dest_dir``.

    ``dockerfile``: the plan's Dockerfile when the caller rendered it already (a build
    renders it once, for dockerfiles/ and every context it stages). Refuses an unlocked
    recipe: the build installs only what a lock pins. ``dest_dir`` must be missing, empty,
    or a context staged here before (it is then cleared).
    """
    recipe, lock = plan.recipe, plan.lock
    if lock is None:
        raise LockError(f"{recipe.name}: not locked; run `imagebuild lock {recipe.name}` "
                        "first (an image installs only what its lock pins)")
    if dockerfile is None:
        dockerfile = render_dockerfile(plan)
    checks = checks_source or CHECKS_SOURCE
    if not (checks / "__main__.py").is_file():
        raise RenderError(f"in-image checks not found: {checks}/__main__.py (the image "
                          "carries them so `imagebuild validate` runs inside it)")
    _prepare_directory(dest_dir)
    (dest_dir / CONTEXT_MARKER).write_text(f"imagebuild {__version__} {recipe.name}\n")
    files: dict[str, str] = {
        "Dockerfile": dockerfile,
        "pylock.toml": python_lock(lock),
        "manifest.json": json.dumps(manifest(plan), indent=2) + "\n",
        "bin/imagebuild": _shim(),
    }
    scripts = {FETCH_UV: SCRIPTS / FETCH_UV}
    if lock.selector is not None:
        files[SELECTOR_FILE] = selector_requirement(lock)
    if device_code_diet(recipe):
        scripts[DEVICE_CODE_CHECK] = SCRIPTS / DEVICE_CODE_CHECK
    # Each component's files and build-time scripts, bind-mounted into the steps that use them.
    for part in plan.parts.values():
        files.update(part.files)
        scripts.update(part.scripts)
    for name, source in scripts.items():
        files.update(staged_script(name, source))
    for name, text in files.items():
        path = dest_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o755)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755 if name.startswith("bin/") else 0o644)
    copy_checks(dest_dir / "checks", checks)
    if lock.source_date_epoch is not None:
        _date(dest_dir, lock.source_date_epoch)
    staged = sorted(str(p.relative_to(dest_dir)) for p in dest_dir.rglob("*")
                    if p.is_file() and p.name != CONTEXT_MARKER)
    return BuildContext(dest_dir, dest_dir / "Dockerfile", tuple(staged))


def staged_script(name: str, source: Path) -> dict[str, str]:
    """A build-time script as the context stages it: a directory ``name`` that Python runs
    (its ``__main__.py``, the script), with the helpers the scripts share beside it; the
    step that runs it bind-mounts the directory and runs ``python3 /tmp/imagebuild/<name>``
    (imagebuild/render/scripts/buildtime.py says why)."""
    return {f"{name}/__main__.py": source.read_text(encoding="utf-8"),
            f"{name}/{SCRIPT_HELPERS.name}": SCRIPT_HELPERS.read_text(encoding="utf-8")}


def copy_checks(directory: Path, source: Path = CHECKS_SOURCE) -> Path:
    """The in-image package as images carry it: ``directory/CHECKS_IMPORT_NAME``, replaced if
    there, without bytecode, readable by any container user (modes from the checkout's umask
    would otherwise leak into the layer and its cache key). Returns the package directory."""
    target = directory / CHECKS_IMPORT_NAME
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def _date(directory: Path, epoch: int) -> None:
    """Give everything staged the lock's epoch: COPY keeps a context file's mtime, and the
    checks' copies would otherwise carry the checkout's times (older than the epoch, so the
    squash's clamp keeps them) and differ between two checkouts of the same commit; nor does
    BuildKit's cache key of a COPY include mtimes, so a layer from another checkout would
    bring that checkout's times along."""
    for path in [*directory.rglob("*"), directory]:
        os.utime(path, (epoch, epoch), follow_symlinks=False)


def _prepare_directory(directory: Path) -> None:
    """Make ``directory`` an empty context; only ever clears one staged here before."""
    if directory.exists():
        if not directory.is_dir():
            raise RenderError(f"{directory}: exists and is not a directory")
        entries = list(directory.iterdir())
        if entries and not (directory / CONTEXT_MARKER).is_file():
            raise RenderError(f"{directory}: not empty and not a build context staged by "
                              "imagebuild; refusing to clear it")
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    directory.mkdir(parents=True, exist_ok=True)


def _shim() -> str:
    return ("#!/bin/sh\n"
            "# imagebuild inside the image: the validation checks, run with the image's Python\n"
            "# (standard library + torch only). Staged by imagebuild's build context.\n"
            f"{SHIM_COMMAND}\n")
