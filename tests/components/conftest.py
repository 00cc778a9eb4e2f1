"""Fixtures for the tests of the image components (imagebuild/components/<name>/): the real
container engines and the loopback registry their stage builds use."""

from __future__ import annotations

from pathlib import Path

from tests.support.engine_env import (  # noqa: F401  (pytest fixtures)
    docker_engine,
    local_registry,
)

REPO = Path(__file__).resolve().parents[2]
