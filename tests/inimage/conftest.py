"""Fixtures for the in-image package's unit tests: a Context as the runner builds one (CPU,
one rank), and a one-rank gloo group for checks that call torch.distributed."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from imagebuild.inimage.check_context import Context
from imagebuild.inimage.gpu_data import effective_thresholds, load_gpu_data
from imagebuild.inimage.job_rank import Launch
from imagebuild.inimage.options import parse


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
