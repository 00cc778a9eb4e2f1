"""Fixtures for the validation suite tests: one real CPU-mode run of the whole suite
(shared by the end-to-end assertions), and a Context factory for unit tests."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from imagebuild.inimage.check_context import Context
from imagebuild.inimage.gpu_data import effective_thresholds, load_gpu_data
from imagebuild.inimage.job_rank import Launch
from imagebuild.inimage.options import parse
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


@pytest.fixture
def make_context(tmp_path: Path) -> Callable[..., Context]:
    def factory(*argv: str, manifest: dict[str, Any] | None = None, **fields: Any) -> Context:
        data = load_gpu_data()
        ctx = Context(options=parse(list(argv)), launch=Launch(0, 1, 0, "127.0.0.1", 0, "single"),
                      mode="cpu", device=torch.device("cpu"), backend="gloo", gpu_data=data,
                      workdir=tmp_path, hosts=["testhost"],
                      thresholds=effective_thresholds(data, None))
        ctx.manifest = manifest
        ctx.manifest_path = str(tmp_path / "manifest.json")
        for key, value in fields.items():
            setattr(ctx, key, value)
        return ctx
    return factory


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    """A one-rank gloo process group, for checks that call torch.distributed."""
    import torch.distributed as dist

    from imagebuild.inimage.job_rank import free_port

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
