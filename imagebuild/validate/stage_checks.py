"""The in-image package (imagebuild.inimage) staged as images carry it, for bind-mounting.

The build context (imagebuild.render.context.build_context) copies that package to
IMAGE_CHECKS_DIR/imagebuild_checks (/opt/imagebuild/checks/imagebuild_checks, gpus.json
included) and installs a shim ``imagebuild`` that runs ``python -m imagebuild_checks``.
``imagebuild validate --mount-checks IMAGE`` mounts a copy staged here over that
directory instead, to run this checkout's checks in an image built before them (or in
any image with python3 and torch).
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.render.context import copy_checks
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
    IMAGE_LIB, or to put on PYTHONPATH), as the build context does; returns ``destination``."""
    copy_checks(destination, CHECKS_DIR)
    destination.chmod(0o755)  # readable by any container user
    return destination
