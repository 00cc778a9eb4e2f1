"""The end-to-end world: a real Docker engine, a Debian base image in a loopback registry,
and a wheel index on 127.0.0.1 serving a real CPU torch wheel. Transitive dependencies come
from PyPI (this project's CI reaches it through a private CA, handed to the build as the
site CA secret)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import engine_env
from tests.support.engine_env import cache_dir
from tests.support.indexserver import IndexServer

# session fixtures shared with the build tests: a started engine, the loopback registry and
# the debootstrap base image pushed there
docker_engine = engine_env.docker_engine
local_registry = engine_env.local_registry
base_image = engine_env.base_image
registry_base_image = engine_env.registry_base_image

#: A CPU build small enough for CI (about 190 MB) that still runs a real training step.
TORCH_VERSION = "2.13.0"
RECIPE = """\
version: 1
description: CPU-only image for the end-to-end test (same machinery as the ROCm recipes)
rocm: null
base_image: {base_image}
python: "3.11"
wheels:
  # replaced at lock time by --index-url (the test index listens on a random port)
  index_url: http://127.0.0.1:9/unused/
  packages:
    torch: {torch}
dockerfile:
  # the engine's built-in frontend: docker/dockerfile images cannot be pulled here
  syntax: null
env:
  IMAGEBUILD_E2E: "yes $HOME stays literal"
labels:
  org.example.purpose: end-to-end-test
"""


def torch_wheel() -> Path:
    """A real CPU torch wheel for Python 3.11, downloaded once into the test cache."""
    directory = cache_dir() / "wheels"
    found = sorted(directory.glob(f"torch-{TORCH_VERSION}*-cp311-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--only-binary", ":all:", "--python-version", "3.11",
                        "--platform", "manylinux_2_28_x86_64", "-d", str(directory),
                        f"torch=={TORCH_VERSION}"], check=True)
        found = sorted(directory.glob(f"torch-{TORCH_VERSION}*-cp311-*.whl"))
    assert found, f"pip download gave no torch {TORCH_VERSION} cp311 wheel in {directory}"
    return found[-1]


@pytest.fixture(scope="session")
def wheel_index(tmp_path_factory: pytest.TempPathFactory) -> IndexServer:
    root = tmp_path_factory.mktemp("index")
    (root / "cpu").mkdir()
    wheel = torch_wheel()
    try:
        os.link(wheel, root / "cpu" / wheel.name)
    except OSError:
        shutil.copy2(wheel, root / "cpu" / wheel.name)
    server = IndexServer(root).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def project(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "recipes").mkdir()
    version = torch_wheel().name.split("-")[1]
    (root / "recipes" / "cpu-e2e.yaml").write_text(
        RECIPE.format(base_image=registry_base_image, torch=version))
    return root
