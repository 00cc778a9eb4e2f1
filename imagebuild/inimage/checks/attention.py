"""attention: which scaled_dot_product_attention backend runs, and how fast, fwd and bwd.

At Llama-3.1-8B training shapes (batch 1, 32 heads, head dim 128, causal, bf16; K and V
already expanded from the 8 KV heads, as the training step does) it records:
- the backend torch picks by default, read from the aten op the profiler sees
  (``_scaled_dot_product_flash_attention`` etc.), which is what training gets;
- which backends can run at all, each forced with torch.nn.attention.sdpa_kernel;
- forward and forward+backward throughput of every fused backend that runs.
A slow flash-attention backward once cost 2x on MI250X: the bwd/fwd time ratio is checked.

FLOPs follow the FlashAttention benchmark convention (Dao, flash-attention
benchmarks/benchmark_flash_attention.py): forward 4*b*h*s^2*d, halved when causal;
backward 2.5x forward; forward+backward 3.5x forward.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch
import torch.nn.functional as F

from ..check_context import Context
from ..result import INCOMPLETE, NO_GPU, CheckResult, above_maximum, below_minimum, judge, skipped
from ..timing import calibrated_time

NAME = "attention"

HEADS = 32
HEAD_DIM = 128

#: aten op name -> backend name, most specific first.
_OP_BACKENDS = (
    ("_scaled_dot_product_flash_attention_for_cpu", "flash_cpu"),
    ("_scaled_dot_product_flash_attention", "flash"),
    ("_scaled_dot_product_efficient_attention", "efficient"),
    ("_scaled_dot_product_cudnn_attention", "cudnn"),
    ("_scaled_dot_product_fused_attention_overrideable", "overrideable"),
    ("_scaled_dot_product_attention_math", "math"),
)


#: Said beside the figures: this check counts the half of the score matrix a causal kernel
#: computes; the train check's MFU counts causal attention whole (PaLM's convention).
FLOPS_CONVENTION = ("causal FLOPs: half the score and value products (FlashAttention's "
                    "benchmark convention); the train check's MFU counts them whole")


def attention_flops(batch: int, heads: int, seq: int, head_dim: int, causal: bool,
                    mode: str) -> float:
    forward = 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
    return {"fwd": forward, "bwd": 2.5 * forward, "fwd_bwd": 3.5 * forward}[mode]


def backend_from_ops(op_names: list[str]) -> str | None:
    for op, backend in _OP_BACKENDS:
        if any(op in name for name in op_names):
            return backend
    return None


def _inputs(seq: int, device: torch.device, dtype: torch.dtype, batch: int = 1):
    shape = (batch, HEADS, seq, HEAD_DIM)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)
    return q, k, v, grad


def default_backend(seq: int, device: torch.device, dtype: torch.dtype) -> str | None:
    """The backend of an unconstrained call, from the aten ops the profiler records."""
    q, k, v, grad = _inputs(seq, device, dtype)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
    return backend_from_ops([event.key for event in prof.key_averages()])


def _backends() -> dict[str, Any]:
    from torch.nn.attention import SDPBackend

    names = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
             "cudnn": "CUDNN_ATTENTION", "math": "MATH"}
    return {name: getattr(SDPBackend, member) for name, member in names.items()
            if hasattr(SDPBackend, member)}


def probe(backend: Any, seq: int, device: torch.device, dtype: torch.dtype) -> str | None:
    """None when the backend runs forward and backward at this shape, else why not."""
    from torch.nn.attention import sdpa_kernel

    q, k, v, grad = _inputs(seq, device, dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # kernel errors surface here, inside the try
            return None
        except RuntimeError as exc:
            why = [str(w.message).splitlines()[0] for w in caught]
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return "; ".join(why[:2] + [first])


def _figure(value: float) -> float:
    """Four significant digits: a small CPU figure stays non-zero instead of rounding to 0.0."""
    return float(f"{value:.4g}")


def measure(backend: Any | None, seq: int, device: torch.device,
            dtype: torch.dtype) -> dict[str, Any]:
    """Forward and forward+backward seconds and TFLOP/s (backend None: torch's choice)."""
    from contextlib import nullcontext

    from torch.nn.attention import sdpa_kernel

    q, k, v, grad = _inputs(seq, device, dtype)
    scope = sdpa_kernel([backend]) if backend is not None else nullcontext()

    def forward() -> None:
        F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward_backward() -> None:
        q.grad = k.grad = v.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    with scope:
        # A forward+backward timed no slower than the forward alone is the machine's noise
        # (a loaded host), not a figure: measure the pair again, at most three times.
        for _ in range(3):
            fwd_s, fwd_iters = calibrated_time(forward, device, warmup=3, target_s=0.1,
                                               min_iters=5, max_iters=100)
            both_s, both_iters = calibrated_time(forward_backward, device, warmup=3,
                                                 target_s=0.2, min_iters=5, max_iters=100)
            if both_s > fwd_s:
                break
    bwd_s = max(both_s - fwd_s, 1e-9)
    return {
        "fwd_ms": round(fwd_s * 1e3, 3), "fwd_bwd_ms": round(both_s * 1e3, 3),
        "fwd_tflops": _figure(attention_flops(1, HEADS, seq, HEAD_DIM, True, "fwd") / fwd_s / 1e12),
        "bwd_tflops": _figure(attention_flops(1, HEADS, seq, HEAD_DIM, True, "bwd") / bwd_s / 1e12),
        "fwd_bwd_tflops": _figure(
            attention_flops(1, HEADS, seq, HEAD_DIM, True, "fwd_bwd") / both_s / 1e12),
        "bwd_fwd_time_ratio": round(bwd_s / fwd_s, 3), "iters": [fwd_iters, both_iters],
    }


def evaluate(default: str | None, timings: dict[str, dict[str, Any]],
             availability: dict[str, str | None], peak: float | None,
             thresholds: dict[str, float], seq: int) -> CheckResult:
    figures: dict[str, Any] = {
        "shape": {"batch": 1, "heads": HEADS, "seq": seq, "head_dim": HEAD_DIM, "causal": True},
        "default_backend": default,
        "backends": {name: ("available" if why is None else f"unavailable: {why}")
                     for name, why in availability.items()},
        "timings": timings, "peak_tflops": peak,
        "flops_convention": FLOPS_CONVENTION,
    }
    mine = timings.get("default")
    problems: list[str] = []
    if default == "math":
        problems.append("SDPA falls back to the math backend (no fused attention kernel: "
                        + ", ".join(f"{n}: {w}" for n, w in availability.items()
                                    if w and n != "math") + ")")
    if mine is None:
        return judge(NAME, problems or ["the default SDPA backend could not be timed"], "", figures)
    figures["fwd_bwd_tflops"] = mine["fwd_bwd_tflops"]
    # each pass on its own too: a rank slow in one pass only hides in the sum
    figures["fwd_tflops"] = mine["fwd_tflops"]
    figures["bwd_tflops"] = mine["bwd_tflops"]
    figures["bwd_fwd_time_ratio"] = mine["bwd_fwd_time_ratio"]
    ratio = above_maximum("backward/forward time", mine["bwd_fwd_time_ratio"],
                          thresholds["attention_max_bwd_fwd_ratio"], "x",
                          f"{default} backend; about 2.5x is expected from its FLOPs")
    if ratio:
        problems.append(ratio)
    if peak is None:
        if problems:
            return judge(NAME, problems, "", figures)
        return skipped(NAME, INCOMPLETE, f"{default} backend, fwd+bwd {mine['fwd_bwd_tflops']:.1f} "
                       "TFLOP/s, but this GPU is not in the peak table: pass --peak-tflops",
                       figures)
    fraction = mine["fwd_bwd_tflops"] / peak
    figures["fraction_of_peak"] = round(fraction, 4)
    low = below_minimum("attention fwd+bwd", fraction * 100,
                        thresholds["attention_min_fraction"] * 100, "% of peak",
                        f"{mine['fwd_bwd_tflops']:.1f} of {peak:g} TFLOP/s, {default} backend")
    if low:
        problems.append(low)
    ok = (f"{default} backend: fwd {mine['fwd_tflops']:.1f}, bwd {mine['bwd_tflops']:.1f}, "
          f"fwd+bwd {mine['fwd_bwd_tflops']:.1f} TFLOP/s ({fraction:.0%} of peak) at seq {seq}")
    return judge(NAME, problems, ok, figures)


def run(ctx: Context) -> CheckResult:
    if ctx.mode != "gpu":
        return skipped(NAME, NO_GPU, "GPU-only: SDPA kernels on CPU say nothing about the "
                       "image's GPU attention")
    seq = ctx.options.attention_seq
    device, dtype = ctx.device, torch.bfloat16
    default = default_backend(seq, device, dtype)
    backends = _backends()
    availability: dict[str, str | None] = {}
    for name, backend in backends.items():
        # math materialises the s x s matrix: probe it small, it is the fallback anyway.
        availability[name] = probe(backend, seq if name != "math" else 256, device, dtype)
    timings: dict[str, dict[str, Any]] = {"default": measure(None, seq, device, dtype)}
    for name, backend in backends.items():
        if name != "math" and availability.get(name) is None and name != default:
            timings[name] = measure(backend, seq, device, dtype)
    torch.cuda.empty_cache()
    figures_extra = {}
    preferred = getattr(torch.backends.cuda, "preferred_rocm_fa_library", None)
    if torch.version.hip and callable(preferred):
        with contextlib.suppress(RuntimeError, AttributeError):
            figures_extra["rocm_fa_library"] = str(preferred())
    result = evaluate(default, timings, availability, ctx.peak_tflops, ctx.thresholds, seq)
    if figures_extra:
        return CheckResult(result.name, result.status, result.reason,
                           {**result.figures, **figures_extra}, result.cause, result.details)
    return result
