"""Fixtures for the doctor's command tests: the Docker engine and the test base image."""

from tests.support.engine_env import base_image, docker_engine  # noqa: F401  (pytest fixtures)
