"""Fixtures for the validation suite tests: one real CPU-mode run of the whole suite
(shared by the end-to-end assertions), and the container engines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.engine_env import (  # noqa: F401  (pytest fixtures, re-exported)
    base_image,
    docker_engine,
    podman_base_image,
    podman_engine,
)
from tests.support.validate import run_imagebuild


@pytest.fixture(scope="session")
def cpu_suite(tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]:
    """`imagebuild validate --local --allow-cpu` for real: 2 gloo ranks, a Llama train step."""
    workdir = tmp_path_factory.mktemp("cpu-suite")
    report_path = workdir / "report.json"
    proc = run_imagebuild("validate", "--local", "--allow-cpu", "--report", str(report_path),
                          cwd=workdir)
    assert report_path.exists(), f"no report; exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(report_path.read_text()), workdir
