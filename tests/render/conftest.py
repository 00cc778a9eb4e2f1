"""Fixtures for the renderer tests.

tests/render/fixtures is a small project of its own (recipes/ + dockerfiles/): the CPU-only
recipe the end-to-end tests build, a realistic hand-checked lock for it (PEP 751 wheels with
real PyPI URLs and hashes; torch served by a local index), and its rendered Dockerfile as
the golden file. After editing fixtures/recipes/cpu-test.yaml, refresh the lock's input
hash (tests.support.render.rewrite_lock) and re-render with
`imagebuild -C tests/render/fixtures render`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imagebuild.recipe.load import natural_key
from tests.support.engine_env import (  # noqa: F401  (pytest fixtures)
    base_image,
    docker_engine,
    local_registry,
    registry_base_image,
)
from tests.support.indexserver import index_server  # noqa: F401  (pytest fixture)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHIPPED = sorted((p.stem for p in (REPO / "recipes").glob("*.yaml") if not p.name.startswith("_")),
                 key=natural_key)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the repository's recipes/ in a fresh project directory (no locks)."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "recipes", root / "recipes",
                    ignore=shutil.ignore_patterns("pylock.*.toml"))
    return root


@pytest.fixture
def cpu_project(tmp_path: Path) -> Path:
    """A copy of the CPU fixture project (recipe, lock, golden Dockerfile)."""
    root = tmp_path / "cpu"
    shutil.copytree(FIXTURES, root)
    return root
