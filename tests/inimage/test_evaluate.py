"""Pass/fail decisions at their seams: thresholds give failed results with measured and
expected numbers; skips carry a cause; the exit code follows them."""

from __future__ import annotations

import pytest

from imagebuild.inimage.checks import attention, collectives, gemm, train
from imagebuild.inimage.gpu_data import effective_thresholds, load_gpu_data
from imagebuild.inimage.model.workload import megatron_collectives
from imagebuild.inimage.result import (
    FAILED,
    INCOMPLETE,
    NO_GPU,
    NOT_APPLICABLE,
    PASSED,
    SKIPPED,
    CheckResult,
    merge_global,
    merge_ranks,
    passed,
    skipped,
)
from imagebuild.inimage.run_report import exit_code

THRESHOLDS = effective_thresholds(load_gpu_data(), "H100")


def _shape(tflops: float, m: int = 8192, n: int = 4096, k: int = 4096) -> dict:
    flops = gemm.gemm_flops(m, n, 1, k)
    return {"shape": [m, n, 1, k], "seconds": flops / (tflops * 1e12), "iters": 10,
            "tflops": tflops, "flops": flops}


def test_gemm_below_threshold_fails_with_measured_and_expected() -> None:
    result = gemm.evaluate([_shape(300.0), _shape(320.0)], 989.0, THRESHOLDS, "H100")
    assert result.status == FAILED
    # equal FLOPs per shape: the workload throughput is the harmonic mean, 309.7 TFLOP/s
    assert "bf16 GEMM 31.3%" in result.reason
    assert f"expected >= {THRESHOLDS['gemm_min_fraction'] * 100:.1f}%" in result.reason
    assert "309.7 of 989 TFLOP/s" in result.reason
    assert result.figures["fraction_of_peak"] == pytest.approx(309.68 / 989, abs=1e-4)


def test_gemm_fast_enough_passes_and_names_the_worst_shape() -> None:
    result = gemm.evaluate([_shape(700.0), _shape(650.0, 4096, 4096, 8192)], 989.0,
                           THRESHOLDS, "H100")
    assert result.status == PASSED, result.reason
    assert result.figures["worst_shape"] == [4096, 4096, 1, 8192]


def test_gemm_one_pathological_shape_fails() -> None:
    result = gemm.evaluate([_shape(900.0)] * 11 + [_shape(50.0, 32000, 4096, 8192)], 989.0,
                           THRESHOLDS, "H100")
    assert result.status == FAILED
    assert "worst shape [32000, 4096, 1, 8192]" in result.reason


def test_gemm_without_peak_is_incomplete_not_passed() -> None:
    result = gemm.evaluate([_shape(100.0)], None, THRESHOLDS, "Mystery GPU")
    assert result.status == SKIPPED and result.cause == INCOMPLETE
    assert "--peak-tflops" in result.reason


def test_gemm_flops_formula() -> None:
    assert gemm.gemm_flops(14336, 4096, 1, 8192) == 2 * 14336 * 4096 * 8192
    assert gemm.gemm_flops(2, 3, 4, 5) == 2 * 2 * 3 * 4 * 5


def test_attention_flops_convention() -> None:
    fwd = attention.attention_flops(1, 32, 8192, 128, True, "fwd")
    assert fwd == 4 * 32 * 8192**2 * 128 / 2
    assert attention.attention_flops(1, 32, 8192, 128, False, "fwd") == 2 * fwd
    assert attention.attention_flops(1, 32, 8192, 128, True, "fwd_bwd") == 3.5 * fwd


def _timing(fwd_bwd_tflops: float, ratio: float) -> dict:
    return {"fwd_tflops": 1.0, "bwd_tflops": 1.0, "fwd_bwd_tflops": fwd_bwd_tflops,
            "bwd_fwd_time_ratio": ratio, "fwd_ms": 1.0, "fwd_bwd_ms": 3.0, "iters": [5, 5]}


def test_attention_math_fallback_and_slow_backward_fail() -> None:
    result = attention.evaluate("math", {"default": _timing(400.0, 2.6)},
                                {"flash": "No available kernel", "math": None}, 989.0,
                                THRESHOLDS, 8192)
    assert result.status == FAILED and "math backend" in result.reason
    slow_bwd = attention.evaluate("flash", {"default": _timing(400.0, 6.0)},
                                  {"flash": None}, 989.0, THRESHOLDS, 8192)
    assert slow_bwd.status == FAILED
    assert "backward/forward time 6.00x, expected <= 4.50x" in slow_bwd.reason


def test_attention_good_flash_passes() -> None:
    result = attention.evaluate("flash", {"default": _timing(400.0, 2.7)}, {"flash": None},
                                989.0, THRESHOLDS, 8192)
    assert result.status == PASSED, result.reason
    assert "flash backend" in result.reason


def test_backend_is_read_from_aten_op_names() -> None:
    assert attention.backend_from_ops(
        ["aten::_scaled_dot_product_flash_attention", "aten::empty"]) == "flash"
    assert attention.backend_from_ops(
        ["aten::_scaled_dot_product_efficient_attention_backward"]) == "efficient"
    assert attention.backend_from_ops(["aten::_scaled_dot_product_flash_attention_for_cpu"]) \
        == "flash_cpu"
    assert attention.backend_from_ops(["aten::bmm"]) is None


def test_busbw_formulas_follow_nccl_tests() -> None:
    # nccl-tests PERFORMANCE.md: allreduce 2(n-1)/n, allgather and reducescatter (n-1)/n
    assert collectives.bus_bandwidth_factor("all_reduce", 8) == pytest.approx(1.75)
    assert collectives.bus_bandwidth_factor("all_gather", 8) == pytest.approx(0.875)
    assert collectives.bus_bandwidth_factor("reduce_scatter", 2) == pytest.approx(0.5)
    algbw, busbw = collectives.bandwidths("all_reduce", 302006272, 0.002, 4)
    assert algbw == pytest.approx(302006272 / 0.002 / 1e9)
    assert busbw == pytest.approx(algbw * 1.5)


def _rows(busbw: float) -> list[dict]:
    sweep = [{"op": op, "bytes": 2**30, "requested_bytes": 2**30, "seconds": 0.01,
              "iters": 20, "algbw_gbps": busbw, "busbw_gbps": busbw, "source": "size sweep"}
             for op in collectives.OPS]
    megatron = [{"op": c.op, "bytes": c.bytes, "requested_bytes": c.bytes, "seconds": 0.01,
                 "iters": 20, "algbw_gbps": busbw, "busbw_gbps": busbw, "dtype": c.dtype,
                 "source": c.source} for c in megatron_collectives()]
    return sweep + megatron


def test_collectives_thresholds_depend_on_node_count() -> None:
    single = collectives.evaluate(_rows(60.0), 8, 1, "gpu", THRESHOLDS, "nccl")
    assert single.status == FAILED
    assert "all_reduce busbw 60.0 GB/s, expected >= 150.0 GB/s" in single.reason
    multi = collectives.evaluate(_rows(60.0), 16, 2, "gpu", THRESHOLDS, "nccl")
    assert multi.status == PASSED, multi.reason
    # the Megatron sizes under a key that says so (it was "fsdp_sizes", which they are not)
    assert multi.figures["megatron_bucket_sizes"]["reduce_scatter_302006272"] == 60.0
    assert "fsdp_sizes" not in multi.figures


def test_gpu_measurements_include_the_root_group_and_fp32_megatron_reduce_scatter() -> None:
    wanted = collectives.measurements(True, [2**20], 12)
    root = [c for c in wanted if c.source.startswith("FSDP2 root group")]
    assert [(c.op, c.dtype) for c in root] == [("all_gather", "bfloat16"),
                                               ("reduce_scatter", "float32")]
    assert root[1].bytes == 4 * (2 * 128256 * 4096 + 4104)  # norm padded for 12 ranks
    assert root[1].bytes > 2**30 and root[0].bytes > 2**30  # beyond the sweep's 1 GiB
    megatron = [c for c in wanted if "Megatron" in c.source]
    assert {(c.op, c.dtype) for c in megatron} == {("all_gather", "bfloat16"),
                                                    ("reduce_scatter", "float32")}


def _train_figures(losses: list[float], tokens_per_s: float = 5000.0) -> dict:
    from imagebuild.inimage.model.llama import LLAMA_3_1_8B
    from imagebuild.inimage.model.sizing import flops_per_token

    flops = flops_per_token(LLAMA_3_1_8B, 8192)
    return {"layers": 32, "layers_source": "test", "seq": 8192, "losses": losses,
            "loss_first": losses[0], "loss_last": losses[-1],
            "tokens_per_s_per_gpu": tokens_per_s, "flops_per_token": flops,
            "tflops_per_gpu": tokens_per_s * flops / 1e12}


def test_train_reports_mfu_with_its_convention_and_hfu_beside_it() -> None:
    figures = _train_figures([12.0, 11.0], tokens_per_s=5000)
    figures["hardware_tflops_per_gpu"] = figures["tflops_per_gpu"] * 1.3
    result = train.evaluate(figures, [[12.0, 11.0]], 989.0, THRESHOLDS, gpu=True)
    assert result.figures["hfu"] == pytest.approx(result.figures["mfu"] * 1.3, abs=1e-4)
    assert "(model FLOPs, recompute not counted)" in result.reason
    assert f"HFU {result.figures['hfu']:.1%} (with recompute)" in result.reason


def test_train_low_mfu_fails_with_numbers() -> None:
    result = train.evaluate(_train_figures([12.0, 11.0], tokens_per_s=1000), [[12.0, 11.0]],
                            989.0, THRESHOLDS, gpu=True)
    assert result.status == FAILED
    assert "MFU 5.86%, expected >= 28.0%" in result.reason


def test_train_loss_must_be_finite_and_falling() -> None:
    rising = train.evaluate(_train_figures([11.0, 11.5]), [[11.0, 11.5]], 989.0, THRESHOLDS,
                            gpu=True)
    assert rising.status == FAILED and "did not fall" in rising.reason
    nan = train.evaluate(_train_figures([11.0, float("nan")]), [[11.0, 10.0], [11.0, float("nan")]],
                         989.0, THRESHOLDS, gpu=True)
    assert nan.status == FAILED and "rank(s) 1" in nan.reason


def test_a_loss_curve_that_ends_lower_but_climbs_on_the_whole_fails() -> None:
    """First 10, last 9.9, but 13 and 14 between: its least-squares slope is +0.08 per step
    (AMD CVS's rule: the slope must be below 0); last-below-first alone would pass it."""
    losses = [10.0, 13.0, 14.0, 14.0, 9.9]
    result = train.evaluate(_train_figures(losses, 5762), [losses], 989.0, THRESHOLDS,
                            gpu=True)
    assert result.status == FAILED and "least-squares slope +0.08 per step" in result.reason
    assert result.figures["loss_slope_per_step"] == pytest.approx(0.08)
    falling = [12.0, 11.0, 11.5, 10.0]
    good = train.evaluate(_train_figures(falling, 5762), [falling], 989.0, THRESHOLDS, gpu=True)
    assert good.status == PASSED and good.figures["loss_slope_per_step"] < 0


def test_train_torchtitan_level_passes_and_unknown_gpu_is_incomplete() -> None:
    good = train.evaluate(_train_figures([12.0, 10.0], 5762), [[12.0, 10.0]], 989.0, THRESHOLDS,
                          gpu=True)
    assert good.status == PASSED and "MFU 33.7%" in good.reason
    unknown = train.evaluate(_train_figures([12.0, 10.0]), [[12.0, 10.0]], None, THRESHOLDS,
                             gpu=True)
    assert unknown.status == SKIPPED and unknown.cause == INCOMPLETE


def test_results_never_pass_silently() -> None:
    with pytest.raises(ValueError, match="reason"):
        passed("gemm", "  ")
    with pytest.raises(ValueError, match="cause"):
        CheckResult("gemm", SKIPPED, "why")


def test_exit_code_rules() -> None:
    ok = passed("train", "fine")
    no_gpu = skipped("gemm", NO_GPU, "no GPU")
    not_applicable = skipped("hipblaslt", NOT_APPLICABLE, "NVIDIA")
    incomplete = skipped("gemm", INCOMPLETE, "no peak")
    bad = CheckResult("train", FAILED, "slow")
    assert exit_code([ok, not_applicable], allow_cpu=False) == 0
    assert exit_code([ok, no_gpu], allow_cpu=False) == 1
    assert exit_code([ok, no_gpu], allow_cpu=True) == 0
    assert exit_code([ok, incomplete], allow_cpu=True) == 1
    assert exit_code([bad], allow_cpu=True) == 1


def test_merging_ranks() -> None:
    a = passed("gemm", "700 TFLOP/s", {"tflops": 700})
    b = CheckResult("gemm", FAILED, "100 TFLOP/s, expected >= 400", {"tflops": 100})
    merged = merge_ranks([a, b], ["n1", "n2"])
    assert merged.status == FAILED and merged.reason.startswith("rank 1 (n2): 100 TFLOP/s")
    assert [r["tflops"] for r in merged.figures["per_rank"]] == [700, 100]
    mixed = merge_ranks([a, skipped("gemm", NOT_APPLICABLE, "other rank")], ["n1", "n1"])
    assert mixed.status == PASSED and "skipped on 1" in mixed.reason
    both_skipped = merge_ranks([no := skipped("gemm", NO_GPU, "x"), no], ["n1", "n1"])
    assert both_skipped.status == SKIPPED and both_skipped.cause == NO_GPU
    global_ = merge_global([a, b], ["n1", "n2"])
    assert global_.status == FAILED and "rank 1 (n2)" in global_.reason
    assert merge_global([a, a], ["n1", "n2"]).figures == a.figures
