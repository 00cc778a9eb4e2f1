"""The build-time scripts as the build context stages them (a directory with the script as
its ``__main__.py`` and the shared helpers beside it), for tests that run them for real:
``python <staged>`` runs exactly what a build step runs."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from imagebuild.render.context import staged_script

_DIRECTORY: Path | None = None


def staged(name: str, source: Path) -> Path:
    """``source`` staged as the build context's ``name`` (``hipblaslt-check.py``), in a
    directory of this test process removed at its exit; the path to run."""
    global _DIRECTORY
    if _DIRECTORY is None:
        _DIRECTORY = Path(tempfile.mkdtemp(prefix="imagebuild-scripts-"))
        atexit.register(shutil.rmtree, _DIRECTORY, True)
    for relative, text in staged_script(name, source).items():
        path = _DIRECTORY / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return _DIRECTORY / name
