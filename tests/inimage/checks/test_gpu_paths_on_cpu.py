"""The GPU branches of gemm, attention and train, driven on a CPU device.

CI has no GPU, so these branches would otherwise never execute before they meet one. The
kernels run for real (CPU bf16), at small shapes; only the CUDA memory statistics, which
have no CPU counterpart, are stood in for. Throughput far below the stated peak must come
out as failed results carrying measured and expected numbers.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from imagebuild.inimage.checks import attention, gemm, train
from imagebuild.inimage.model.llama import LlamaConfig
from tests.support.validate import report_schema

SMALL = LlamaConfig(n_layers=32, dim=128, n_heads=4, n_kv_heads=2, ffn_dim=384,
                    vocab_size=512, max_seq_len=64)


def _schema_requires(name: str) -> list[str]:
    for rule in report_schema()["$defs"]["check"]["allOf"]:
        if rule["if"]["properties"].get("name", {}).get("const") == name:
            return rule["then"]["properties"]["figures"]["required"]
    raise AssertionError(name)


def _stand_in_cuda(monkeypatch: pytest.MonkeyPatch, free: int) -> None:
    """CUDA memory statistics, which have no CPU counterpart."""
    stand_ins = {
        "mem_get_info": lambda device=None: (free, 4 * 2**30),
        "reset_peak_memory_stats": lambda device=None: None,
        "max_memory_allocated": lambda device=None: 2**30,
        "max_memory_reserved": lambda device=None: 2**30,
        "get_device_properties": lambda device=None: SimpleNamespace(total_memory=4 * 2**30),
    }
    for name, function in stand_ins.items():
        monkeypatch.setattr(torch.cuda, name, function)


def test_gemm_gpu_branch(make_context, monkeypatch: pytest.MonkeyPatch) -> None:
    """The problems come from the train step's configuration (here a small one)."""
    monkeypatch.setattr(gemm, "LLAMA_3_1_8B", SMALL)
    ctx = make_context("--train-seq", "64", mode="gpu", peak_tflops=1000.0)
    result = gemm.run(ctx)
    assert result.status == "failed"
    assert "of 1000 TFLOP/s peak over 15 shapes" in result.reason and "expected >=" in result.reason
    assert "training GEMMs (seq 64 x micro-batch 1)" in result.figures["problems_from"]
    assert sum(s["count"] for s in result.figures["shapes"]) == 3 * (7 * 32 + 1)
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
    """bf16 FSDP2 with the mixed-precision policy and fused AdamW, as on a GPU; the plan
    comes from the memory estimate with a stand-in free-memory figure: all 32 blocks."""
    monkeypatch.setattr(train, "LLAMA_3_1_8B", SMALL)
    _stand_in_cuda(monkeypatch, free=3 * 2**30)
    ctx = make_context("--train-seq", "64", "--train-steps", "3", "--train-warmup", "1",
                       mode="gpu", peak_tflops=1000.0)
    result = train.run(ctx)
    figures = result.figures
    assert result.status == "failed", result.reason
    assert "MFU" in result.reason and "expected >=" in result.reason
    assert figures["workload"] == "full" and figures["layers"] == 32
    setup = figures["configuration"]
    assert setup["layers"] == 32 and setup["activation_checkpointing"] == "none"
    assert setup["precision"].startswith("bf16") and setup["world_size"] == 1
    assert figures["optimizer"] == "AdamW fused"
    assert figures["step_time_spread_s"]["count"] == 3
    assert figures["loss_last"] < figures["loss_first"]
    assert figures["peak_memory_gib"] == 1.0
    assert set(_schema_requires("train")) <= set(figures)


def test_train_gpu_branch_proxy_is_declared_and_not_held_to_the_threshold(
        make_context, monkeypatch: pytest.MonkeyPatch, one_rank_group: None) -> None:
    """Too little memory for all blocks even with full checkpointing: a proxy, labelled,
    with the MFU computed but the full model's threshold not applied."""
    monkeypatch.setattr(train, "LLAMA_3_1_8B", SMALL)
    _stand_in_cuda(monkeypatch, free=int(2.26 * 2**30))  # 9 blocks fit
    ctx = make_context("--train-seq", "64", "--train-steps", "2", "--train-warmup", "1",
                       mode="gpu", peak_tflops=1000.0)
    result = train.run(ctx)
    figures = result.figures
    assert result.status == "passed", result.reason
    assert result.reason.startswith("PROXY, not the full model")
    assert "threshold is not applied" in result.reason
    assert figures["workload"] == "proxy" and 1 <= figures["layers"] < 32
    assert figures["activation_checkpointing"] == "full"
    assert figures["proxy"]["full_layers"] == 32 and figures["proxy"]["per_block"]["parameters"]
    assert figures["configuration"]["model"].startswith("Llama-3.1-8B proxy")
    assert figures["checkpointed_blocks"] == figures["layers"]
