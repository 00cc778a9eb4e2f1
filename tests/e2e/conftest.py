"""The end-to-end world: a real Docker engine, a Debian base image in a loopback registry,
and a wheel index on 127.0.0.1 serving a real CPU torch wheel. Transitive dependencies come
from PyPI (this project's CI reaches it through a private CA, handed to the build as the
site CA secret)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from testbed.cpu_recipe import torch_wheel, write_recipe
from tests.support import engine_env
from tests.support.indexserver import IndexServer

# session fixtures shared with the build tests: a started engine, the loopback registry and
# the debootstrap base image pushed there
docker_engine = engine_env.docker_engine
local_registry = engine_env.local_registry
base_image = engine_env.base_image
registry_base_image = engine_env.registry_base_image

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
    write_recipe(root, "cpu-e2e", registry_base_image)
    return root
