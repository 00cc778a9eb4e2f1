"""gemm: bf16 matrix multiply throughput on the Llama-3.1-8B training shapes vs the peak.

The shapes are those hipBLASLt logged during Llama-3.1-8B training ([m, n, batch, k],
REFERENCE.md). Each is run as ``x @ w.T`` (nn.Linear's layout) into a preallocated output,
timed with device events around a calibrated loop. A multiply of (m x k) by (k x n) is
2*m*n*k floating-point operations (one multiply and one add per term).
"""

from __future__ import annotations

from typing import Any

import torch

from .context import Context
from .result import INCOMPLETE, NO_GPU, CheckResult, below_minimum, failed, judge, skipped
from .timing import calibrated_time

NAME = "gemm"

#: [m, n, batch, k] seen in Llama-3.1-8B training (REFERENCE.md, from hipBLASLt logs).
LLAMA_GEMM_SHAPES: tuple[tuple[int, int, int, int], ...] = (
    (14336, 4096, 1, 8192), (4096, 14336, 1, 8192), (8192, 14336, 1, 4096),
    (8192, 4096, 1, 6144), (8192, 4096, 1, 14336), (8192, 4096, 1, 4096),
    (6144, 4096, 1, 8192), (4096, 4096, 1, 8192), (8192, 4096, 1, 32000),
    (32000, 4096, 1, 8192), (8192, 6144, 1, 4096), (8192, 32000, 1, 4096),
)


def gemm_flops(m: int, n: int, batch: int, k: int) -> int:
    return 2 * m * n * k * batch


def check_correctness(device: torch.device) -> str | None:
    """A bf16 multiply on the device against a float64 CPU reference of the same inputs.

    bf16 keeps 8 mantissa bits: with fp32 accumulation the rounding of the output dominates
    (relative 2**-8); 2% of the largest magnitude leaves room for that and nothing else.
    """
    gen = torch.Generator().manual_seed(1234)
    a = torch.randn(512, 1024, generator=gen).to(torch.bfloat16)
    b = torch.randn(768, 1024, generator=gen).to(torch.bfloat16)
    reference = a.double() @ b.double().T
    result = (a.to(device) @ b.to(device).T).double().cpu()
    error = (result - reference).abs().max().item() / reference.abs().max().item()
    if not error < 0.02:  # NaN fails too
        return f"bf16 512x768x1024 multiply is wrong on the GPU (max relative error {error:.3g})"
    return None


def measure_shape(m: int, n: int, batch: int, k: int, device: torch.device,
                  target_s: float = 0.05) -> dict[str, Any]:
    dtype = torch.bfloat16
    if batch == 1:
        a = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        out = torch.empty(m, n, device=device, dtype=dtype)
        wt = w.T

        def step() -> None:
            torch.mm(a, wt, out=out)
    else:
        a = torch.randn(batch, m, k, device=device, dtype=dtype)
        w = torch.randn(batch, n, k, device=device, dtype=dtype)
        out = torch.empty(batch, m, n, device=device, dtype=dtype)
        wt = w.transpose(1, 2)

        def step() -> None:
            torch.bmm(a, wt, out=out)

    seconds, iters = calibrated_time(step, device, warmup=3, target_s=target_s,
                                     min_iters=5, max_iters=200)
    flops = gemm_flops(m, n, batch, k)
    return {"shape": [m, n, batch, k], "seconds": seconds, "iters": iters,
            "tflops": flops / seconds / 1e12, "flops": flops}


def evaluate(per_shape: list[dict[str, Any]], peak: float | None,
             thresholds: dict[str, float], device_label: str) -> CheckResult:
    """Pass/fail of measured shapes against the peak: the workload-weighted throughput
    (all FLOPs over all time) and the worst single shape."""
    total_flops = sum(s["flops"] for s in per_shape)
    total_time = sum(s["seconds"] for s in per_shape)
    aggregate = total_flops / total_time / 1e12
    worst = min(per_shape, key=lambda s: s["tflops"])
    figures: dict[str, Any] = {
        "shapes": [{k: v for k, v in s.items() if k != "flops"} for s in per_shape],
        "tflops": round(aggregate, 2), "worst_shape": worst["shape"],
        "worst_shape_tflops": round(worst["tflops"], 2), "peak_tflops": peak,
    }
    if peak is None:
        return skipped(NAME, INCOMPLETE,
                       f"{aggregate:.1f} TFLOP/s measured, but {device_label} is not in the "
                       f"peak table: pass --peak-tflops to judge it", figures)
    fraction = aggregate / peak
    worst_fraction = worst["tflops"] / peak
    figures["fraction_of_peak"] = round(fraction, 4)
    figures["worst_shape_fraction_of_peak"] = round(worst_fraction, 4)
    problems = [p for p in (
        below_minimum("bf16 GEMM", fraction * 100, thresholds["gemm_min_fraction"] * 100, "%",
                      f"{aggregate:.1f} of {peak:g} TFLOP/s peak over {len(per_shape)} shapes"),
        below_minimum(f"worst shape {worst['shape']}", worst_fraction * 100,
                      thresholds["gemm_min_fraction_worst_shape"] * 100, "% of peak",
                      f"{worst['tflops']:.1f} TFLOP/s"),
    ) if p]
    ok = (f"{aggregate:.1f} TFLOP/s = {fraction:.0%} of {peak:g} peak over {len(per_shape)} "
          f"Llama-3.1-8B shapes; worst {worst['shape']} {worst['tflops']:.1f}")
    return judge(NAME, problems, ok, figures)


def run(ctx: Context) -> CheckResult:
    if ctx.mode != "gpu":
        return skipped(NAME, NO_GPU, "GPU-only: bf16 GEMM throughput needs a GPU")
    wrong = check_correctness(ctx.device)
    if wrong:
        return failed(NAME, wrong)
    per_shape = [measure_shape(m, n, b, k, ctx.device) for m, n, b, k in LLAMA_GEMM_SHAPES]
    torch.cuda.empty_cache()
    label = ctx.gpu.name if ctx.gpu else "this GPU"
    return evaluate(per_shape, ctx.peak_tflops, ctx.thresholds, label)
