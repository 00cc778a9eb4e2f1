"""The project directory (recipes/, dockerfiles/, envs/, ci/, schema/) a run works on.

The CLI sets it once per command from ``--project`` (default: ``$IMAGEBUILD_PROJECT``, then
the working directory) with ``chosen_project``; library code asks ``project_dir()``. A
context variable, not ``os.environ``: choosing a project changes nothing a child process
or a later run in the same interpreter (a test calling ``cli.main`` twice) inherits.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

#: The environment variable the CLI reads when ``--project`` is not given.
PROJECT_ENV = "IMAGEBUILD_PROJECT"

_chosen: ContextVar[Path | None] = ContextVar("imagebuild_project", default=None)


def default_project() -> Path:
    """``$IMAGEBUILD_PROJECT``, else the working directory (resolved)."""
    return Path(os.environ.get(PROJECT_ENV) or ".").resolve()


def project_dir() -> Path:
    """The project chosen for this run, else the default."""
    return _chosen.get() or default_project()


@contextmanager
def chosen_project(path: Path | str | None) -> Iterator[Path]:
    """Within the block, ``project_dir()`` is ``path`` (resolved; None: the default)."""
    project = Path(path).resolve() if path else default_project()
    token = _chosen.set(project)
    try:
        yield project
    finally:
        _chosen.reset(token)
