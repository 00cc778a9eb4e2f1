"""The GPU branches of gemm, attention and train, driven on a CPU device.

CI has no GPU, so these branches would otherwise never execute before they meet one. The
kernels run for real (CPU bf16), at small shapes; only the CUDA memory statistics, which
have no CPU counterpart, are stood in for. Throughput far below the stated peak must come
out as failed results carrying measured and expected numbers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from imagebuild.validate.checks import attention, gemm, train
from imagebuild.validate.checks.launch import free_port
from imagebuild.validate.checks.llama import LlamaConfig
from tests.support.validate import report_schema

SMALL = LlamaConfig(n_layers=32, dim=128, n_heads=4, n_kv_heads=2, ffn_dim=384,
                    vocab_size=512, max_seq_len=64)


@pytest.fixture
def one_rank_group() -> Iterator[None]:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _schema_requires(name: str) -> list[str]:
    for rule in report_schema()["$defs"]["check"]["allOf"]:
        if rule["if"]["properties"].get("name", {}).get("const") == name:
            return rule["then"]["properties"]["figures"]["required"]
    raise AssertionError(name)


def test_gemm_gpu_branch(make_context, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gemm, "LLAMA_GEMM_SHAPES", ((64, 32, 1, 48), (32, 64, 1, 16)))
    ctx = make_context(mode="gpu", peak_tflops=1000.0)
    result = gemm.run(ctx)
    assert result.status == "failed"
    assert "of 1000 TFLOP/s peak over 2 shapes" in result.reason and "expected >=" in result.reason
    assert set(_schema_requires("gemm")) <= set(result.figures)


def test_attention_gpu_branch(make_context) -> None:
    ctx = make_context("--attention-seq", "64", mode="gpu", peak_tflops=1000.0)
    result = attention.run(ctx)
    assert result.status == "failed" and "attention fwd+bwd" in result.reason
    assert result.figures["default_backend"] in ("flash_cpu", "math")
    assert set(result.figures["backends"]) >= {"flash", "efficient", "math"}
    assert set(_schema_requires("attention")) <= set(result.figures)


def test_train_gpu_branch(make_context, monkeypatch: pytest.MonkeyPatch,
                          one_rank_group: None) -> None:
    """bf16 FSDP2 with the mixed-precision policy and fused AdamW, as on a GPU; the layer
    count comes from the memory estimate with a stand-in free-memory figure."""
    monkeypatch.setattr(train, "LLAMA_3_1_8B", SMALL)
    stand_ins = {
        "mem_get_info": lambda device=None: (3 * 2**30, 4 * 2**30),
        "reset_peak_memory_stats": lambda device=None: None,
        "max_memory_allocated": lambda device=None: 2**30,
        "max_memory_reserved": lambda device=None: 2**30,
        "get_device_properties": lambda device=None: SimpleNamespace(total_memory=4 * 2**30),
    }
    for name, function in stand_ins.items():
        monkeypatch.setattr(torch.cuda, name, function)
    ctx = make_context("--train-seq", "64", "--train-steps", "3", "--train-warmup", "1",
                       mode="gpu", peak_tflops=1000.0)
    result = train.run(ctx)
    figures = result.figures
    assert result.status == "failed", result.reason
    assert "MFU" in result.reason and "expected >=" in result.reason
    assert figures["layers_source"] == "fits in free memory (estimate)"
    assert 1 <= figures["layers"] <= 32 and figures["memory_estimate"]["layers"] == figures["layers"]
    assert figures["dtype"] == "torch.bfloat16" and figures["optimizer"] == "AdamW fused"
    assert figures["loss_last"] < figures["loss_first"]
    assert figures["peak_memory_gib"] == 1.0
    assert set(_schema_requires("train")) <= set(figures)
