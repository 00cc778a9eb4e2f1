"""Fixtures for the build tests: real engines, the debootstrap base image, captured logs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.engine_env import (  # noqa: F401  (pytest fixtures, re-exported)
    base_image,
    docker_engine,
    local_registry,
    podman_base_image,
    podman_engine,
    registry_base_image,
)

HERE = Path(__file__).parent
#: Build output captured on a real engine (docker 20.10 built-in BuildKit, podman 4.3).
DATA = HERE / "data"
DOCKERFILES = HERE / "dockerfiles"


def captured(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


@pytest.fixture(autouse=True)
def _no_ambient_site_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IMAGEBUILD_SITE_CA", raising=False)
