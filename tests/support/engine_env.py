"""pytest fixtures for the real container engines: a started Docker daemon, podman, the
loopback registry and the debootstrapped Debian base image (testbed.base_images makes them).

Use from any test folder's conftest.py::

    from tests.support.engine_env import (  # noqa: F401  (pytest fixtures)
        docker_engine, podman_engine, local_registry, base_image, registry_base_image,
        podman_base_image)
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from imagebuild.engine.base import Engine
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.podman import PodmanEngine
from imagebuild.engine.select import open_engine
from imagebuild.errors import EngineError
from testbed.base_images import (  # noqa: F401  (re-exported for tests)
    BASE_IMAGE,
    REGISTRY,
    REGISTRY_BASE_IMAGE,
    cache_dir,
    ensure_docker_daemon,
    import_base_image_docker,
    import_base_image_podman,
    push_base_image,
    registry_up,
)

#: This machine's CA bundle: builds reach PyPI through the workplace's CA, handed in as the
#: site-CA secret.
SITE_CA = Path("/etc/ssl/certs/ca-certificates.crt")


@contextmanager
def imagebuild_env(project: Path, cache: Path, *, unset: tuple[str, ...] = ()
                   ) -> Iterator[None]:
    """The environment an end-to-end test runs imagebuild in: its project and download
    cache, the docker backend, the site CA when the machine has one; ``unset`` variables
    removed. The process environment is restored afterwards."""
    saved = dict(os.environ)
    os.environ.update(IMAGEBUILD_PROJECT=str(project), IMAGEBUILD_CACHE=str(cache),
                      IMAGEBUILD_BACKEND="docker")
    for name in unset:
        os.environ.pop(name, None)
    if SITE_CA.is_file():
        os.environ["IMAGEBUILD_SITE_CA"] = str(SITE_CA)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


# --------------------------------------------------------------------------------------
# pytest fixtures
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def docker_engine() -> DockerEngine:
    reason = ensure_docker_daemon()
    if reason:
        pytest.skip(f"no Docker engine could be started: {reason}")
    engine = open_engine("docker")
    assert isinstance(engine, DockerEngine)
    return engine


@pytest.fixture(scope="session")
def podman_engine() -> PodmanEngine:
    try:
        engine = open_engine("podman")
    except EngineError as exc:
        pytest.skip(f"podman is not usable here: {exc}")
    assert isinstance(engine, PodmanEngine)
    return engine


@pytest.fixture(scope="session")
def local_registry(docker_engine: Engine) -> str:
    """``host:port`` of a plain-http registry on loopback (started by setup-system.sh)."""
    deadline = time.monotonic() + 15
    while not registry_up():
        if time.monotonic() > deadline:
            pytest.fail(f"no registry answers on http://{REGISTRY}/v2/ "
                        "(.ci/setup-system.sh starts Debian's docker-registry there)")
        time.sleep(0.5)
    return REGISTRY


@pytest.fixture(scope="session")
def base_image(docker_engine: DockerEngine) -> str:
    """``imagebuild-test/debian:bookworm`` in the Docker engine (debootstrap + import)."""
    return import_base_image_docker(docker_engine)


@pytest.fixture(scope="session")
def registry_base_image(docker_engine: DockerEngine, base_image: str, local_registry: str) -> str:
    """The base image in the loopback registry: ``127.0.0.1:5000/imagebuild-test/debian:bookworm``."""
    return push_base_image(docker_engine)


@pytest.fixture(scope="session")
def podman_base_image(podman_engine: PodmanEngine) -> str:
    return import_base_image_podman(podman_engine)
