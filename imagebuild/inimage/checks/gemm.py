"""gemm: bf16 matrix multiply throughput on the GEMMs of the Llama-3.1-8B train step.

The problems are derived from the same model configuration the train check steps
(workload.gemm_problems: every nn.Linear's forward and its two backward products at
sequence x micro-batch tokens, in PyTorch's row-major terms with their operand
transposes), or read from ``--gemm-problems FILE`` (a tuning tool's CSV in hipBLASLt
column-major terms). Each runs as ``torch.mm`` on operands laid out as training holds them
(a transposed operand is a transposed view of a contiguous tensor), into a preallocated
output, timed with device events around a calibrated loop. Each iteration takes the next
of several operand sets (A, B and the output) whose bytes together exceed twice the GPU's
last-level cache (gpus.json llc_mib: 256 MB Infinity Cache on MI300X), as hipblaslt-bench's
rotating buffer does (--rotating): reusing one set would leave it partly in cache and time
a GEMM training never runs, since a step's next GEMM reads operands the cache has not seen.
A multiply of (m x k) by
(k x n) is 2*m*n*k floating-point operations. The headline figure weights each problem
by how often one training step runs it: all FLOPs of a step over all their time. It also
says which path a biased Linear (torch's addmm) took, the Lt library's or the other BLAS's,
and whether the environment sets what upstream says for the image's torch (blas_path.py).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch

from ..check_context import Context
from ..model.llama import LLAMA_3_1_8B, LLAMA_CPU_SMOKE
from ..model.workload import GemmProblem, gemm_problems, read_gemm_problems
from ..result import (
    FAILED,
    INCOMPLETE,
    NO_GPU,
    CheckResult,
    below_minimum,
    failed,
    judge,
    passed,
    skipped,
)
from ..taf import summary as taf_summary
from ..test_hooks import hook_figures, slow_rank_delay
from ..timing import calibrated_time
from . import blas_path

NAME = "gemm"


def training_problems(seq: int = 8192, batch: int = 1) -> list[GemmProblem]:
    """The GEMMs of one Llama-3.1-8B training step per rank (no recomputation counted)."""
    config = replace(LLAMA_3_1_8B, max_seq_len=seq)
    return gemm_problems(config, seq * batch)


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


#: The last-level cache assumed for a GPU the table does not know: the largest it lists.
DEFAULT_LLC_BYTES = 256 * 2**20
#: Operand sets span this many times the last-level cache.
ROTATE_OVER_CACHE = 2
#: At most this many sets: a problem so small that 64 sets fit in the cache is said so
#: in its row (``rotating_exceeds_cache`` false) rather than given thousands of sets.
MAX_SETS = 64


def rotating_operands(problem: GemmProblem, device: torch.device, llc_bytes: int,
                      dtype: torch.dtype = torch.bfloat16,
                      ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(A, B, out) sets, laid out as training holds them, that together take more than
    ROTATE_OVER_CACHE x ``llc_bytes``, so no iteration finds its operands in the cache."""
    m, n, k = problem.m, problem.n, problem.k
    per_set = (m * k + k * n + m * n) * torch.tensor([], dtype=dtype).element_size()
    count = min(MAX_SETS, max(2, -(-ROTATE_OVER_CACHE * llc_bytes // per_set)))
    sets = []
    for _ in range(count):
        a = (torch.randn(k, m, device=device, dtype=dtype).T if problem.trans_a
             else torch.randn(m, k, device=device, dtype=dtype))
        b = (torch.randn(n, k, device=device, dtype=dtype).T if problem.trans_b
             else torch.randn(k, n, device=device, dtype=dtype))
        sets.append((a, b, torch.empty(m, n, device=device, dtype=dtype)))
    return sets


def measure_problem(problem: GemmProblem, device: torch.device, target_s: float = 0.05,
                    llc_bytes: int = DEFAULT_LLC_BYTES, dtype: torch.dtype = torch.bfloat16,
                    delay_s: float = 0.0) -> dict[str, Any]:
    sets = rotating_operands(problem, device, llc_bytes, dtype)
    turn = [0]

    def step() -> None:
        a, b, out = sets[turn[0] % len(sets)]
        turn[0] += 1
        torch.mm(a, b, out=out)
        if delay_s:
            time.sleep(delay_s)  # the straggler test hook only (test_hooks.py)

    seconds, iters = calibrated_time(step, device, warmup=3, target_s=target_s,
                                     min_iters=5, max_iters=200)
    flops = problem.flops
    rotating = sum(t.numel() * t.element_size() for tensors in sets for t in tensors)
    return {"shape": [problem.m, problem.n, problem.k], "trans_a": problem.trans_a,
            "trans_b": problem.trans_b, "count": problem.count, "source": problem.source,
            "seconds": seconds, "iters": iters, "tflops": flops / seconds / 1e12,
            "flops": flops, "rotating_sets": len(sets), "rotating_bytes": rotating,
            "rotating_exceeds_cache": rotating > llc_bytes}


def evaluate(per_shape: list[dict[str, Any]], peak: float | None,
             thresholds: dict[str, float], device_label: str,
             origin: str = "Llama-3.1-8B training GEMMs") -> CheckResult:
    """Pass/fail of measured problems against the peak: the workload-weighted throughput
    (all FLOPs of a step over all their time, each problem counted as often as a step runs
    it) and the worst single problem."""
    total_flops = sum(s["flops"] * s.get("count", 1) for s in per_shape)
    total_time = sum(s["seconds"] * s.get("count", 1) for s in per_shape)
    aggregate = total_flops / total_time / 1e12
    worst = min(per_shape, key=lambda s: s["tflops"])
    taf = taf_summary(per_shape)
    figures: dict[str, Any] = {
        "shapes": [{k: v for k, v in s.items() if k != "flops"} for s in per_shape],
        "tflops": round(aggregate, 2), "worst_shape": worst["shape"],
        "worst_shape_tflops": round(worst["tflops"], 2), "peak_tflops": peak,
        "problems_from": origin, **taf,
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
          f"{origin}; worst {worst['shape']} {worst['tflops']:.1f}; TAF-style "
          f"{taf['taf_tflops']} over {taf['taf_shapes']} shapes, best shape "
          f"{taf['best_shape']} {taf['best_shape_tflops']}")
    return judge(NAME, problems, ok, figures)


#: Operand sets on CPU span twice this (a server CPU's last-level cache is tens of MB).
CPU_LLC_BYTES = 32 * 2**20


def run(ctx: Context) -> CheckResult:
    if ctx.mode != "gpu":
        if getattr(ctx.options, "cpu_gemm", False):
            return run_on_cpu(ctx)
        blas = blas_path.report(ctx.device)
        return skipped(NAME, NO_GPU, "GPU-only: bf16 GEMM throughput needs a GPU; a biased "
                       f"Linear's path: cannot tell ({blas['observed']['why']})",
                       {"biased_linear": blas})
    wrong = check_correctness(ctx.device)
    if wrong:
        return failed(NAME, wrong)
    if ctx.options.gemm_problems:
        problems = read_gemm_problems(ctx.options.gemm_problems)
        origin = f"problems of {ctx.options.gemm_problems}"
    else:
        seq = ctx.options.train_seq or 8192
        problems = training_problems(seq, ctx.options.train_batch)
        origin = (f"Llama-3.1-8B training GEMMs (seq {seq} x micro-batch "
                  f"{ctx.options.train_batch})")
    model = ctx.gpu_match.model if ctx.gpu_match else None
    llc = int(model.llc_mib * 2**20) if model and model.llc_mib else DEFAULT_LLC_BYTES
    delay = slow_rank_delay(ctx.rank)
    per_shape = [measure_problem(p, ctx.device, llc_bytes=llc, delay_s=delay) for p in problems]
    torch.cuda.empty_cache()
    label = ctx.gpu.name if ctx.gpu else "this GPU"
    result = evaluate(per_shape, ctx.peak_tflops, ctx.thresholds, label, origin)
    result = with_biased_linear(result, blas_path.report(ctx.device),
                                amd=bool(ctx.gpu and ctx.gpu.vendor == "amd"))
    return replace(result, figures={**result.figures, "last_level_cache_bytes": llc,
                                    "operands": f"rotated through more than "
                                                f"{ROTATE_OVER_CACHE}x the last-level cache",
                                    **hook_figures(delay)})


def with_biased_linear(result: CheckResult, blas: dict[str, Any], amd: bool) -> CheckResult:
    """``result`` with the biased Linear's path in its figures and reason; failed on an AMD
    GPU whose torch bypasses hipBLASLt for it by default while the environment does not set
    what upstream says (DISABLE_ADDMM_HIP_LT=0)."""
    observed, setting = blas["observed"], blas["setting"]
    said = (f"a biased Linear took the {observed['path']} path ({observed['library']}: "
            f"{observed['why']})" if observed.get("path") else
            f"a biased Linear's path: cannot tell ({observed['why']})")
    figures = {**result.figures, "biased_linear": blas}
    if amd and not setting.get("ok", True):
        problem = f"{said}; {setting['why']}"
        reason = f"{result.reason}; {problem}" if result.status == FAILED else problem
        return replace(failed(NAME, reason, figures, result.details), duration_s=result.duration_s)
    return replace(result, reason=f"{result.reason}; {said}", figures=figures)


def run_on_cpu(ctx: Context) -> CheckResult:
    """--cpu-gemm: the same measurement on the CPU proxy model's GEMMs in float32, on every
    rank, with no threshold; what it gives a CPU run is a per-rank figure (stragglers)."""
    config = replace(LLAMA_CPU_SMOKE, max_seq_len=256)
    problems = gemm_problems(config, 256)
    delay = slow_rank_delay(ctx.rank)
    per_shape = [measure_problem(p, ctx.device, target_s=0.02, llc_bytes=CPU_LLC_BYTES,
                                 dtype=torch.float32, delay_s=delay) for p in problems]
    total_flops = sum(s["flops"] * s["count"] for s in per_shape)
    total_time = sum(s["seconds"] * s["count"] for s in per_shape)
    tflops = total_flops / total_time / 1e12
    taf = taf_summary(per_shape)
    figures = {"shapes": [{k: v for k, v in s.items() if k != "flops"} for s in per_shape],
               "tflops": round(tflops, 4), "dtype": "float32", "peak_tflops": None, **taf,
               "problems_from": "the CPU proxy model's training GEMMs (seq 256)",
               "last_level_cache_bytes": CPU_LLC_BYTES, **hook_figures(delay),
               "biased_linear": blas_path.report(ctx.device)}
    return passed(NAME, f"CPU proxy: {tflops * 1e3:.1f} GFLOP/s float32 over {len(problems)} "
                  f"GEMMs of the CPU proxy model (no threshold on CPU); TAF-style "
                  f"{(taf['taf_tflops'] or 0) * 1e3:.1f} GFLOP/s, best shape "
                  f"{taf['best_shape']}", figures)
