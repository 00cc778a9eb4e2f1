"""The in-image package (imagebuild.inimage) staged as images carry it, for bind-mounting.

The build context (imagebuild.render.context.build_context) copies that package to
IMAGE_CHECKS_DIR/imagebuild_checks (/opt/imagebuild/checks/imagebuild_checks, gpus.json
included) and installs a shim ``imagebuild`` that runs ``python -m imagebuild_checks``.
``imagebuild validate --mount-checks IMAGE`` mounts a copy staged here over that
directory instead, to run this checkout's checks in an image built before them (or in
any image with python3 and torch).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from imagebuild.render.layout import (
    CHECKS_IMPORT_NAME,
    CHECKS_SOURCE,
    IMAGE_CHECKS_DIR,
    IMAGE_MANIFEST,
)

#: Directory on the image's PYTHONPATH that holds the checks package.
IMAGE_LIB = IMAGE_CHECKS_DIR
#: Import name of the checks package inside images.
IMAGE_PACKAGE = CHECKS_IMPORT_NAME
__all__ = ["CHECKS_DIR", "IMAGE_LIB", "IMAGE_MANIFEST", "IMAGE_PACKAGE", "stage"]

#: The in-image package of this checkout (the one the build context copies).
CHECKS_DIR = CHECKS_SOURCE


def stage(destination: Path) -> Path:
    """Copy the checks package to ``destination/IMAGE_PACKAGE`` (a directory to mount at
    IMAGE_LIB, or to put on PYTHONPATH); returns ``destination``."""
    target = destination / IMAGE_PACKAGE
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(CHECKS_DIR, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in [destination, target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by any container user
    return destination
