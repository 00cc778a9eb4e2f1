"""TAF-style GEMM figure: the FLOP-weighted harmonic mean of throughput over a fixed set
of shapes, beside the best shape.

AMD's Typical Attained FLOPs (TAF) measures every shape of a set fixed before testing
and combines them by FLOPs: with F_i = 2·M·N·K and P_i a shape's throughput,
TAF = ΣF_i / Σ(F_i / P_i), the set's FLOPs over its time, each shape counted once; beside
it the best shape (AMD's Max-Achievable FLOPs takes the best of a sweep) and the peak.
AMD's published set is ten DeepSeek-V3 shapes; on one MI325X, BF16: TAF 616, MAF 831,
peak 1,300 TFLOP/s (https://rocm.blogs.amd.com/artificial-intelligence/taf-blog/README.html).
Here the set is the workload the caller measured (the Llama-3.1-8B training step's GEMMs,
or a tuning bundle's problems), so the figure is TAF-style: AMD's formula on other shapes,
not comparable with AMD's published TAF. It differs from the gemm check's step-weighted
figure, which counts each shape as often as a training step runs it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

DEFINITION = ("TAF-style: sum of FLOPs over sum of FLOPs/throughput, each distinct shape "
              "once (AMD's Typical Attained FLOPs formula on this workload's shapes)")


def taf(pairs: Iterable[tuple[float, float]]) -> float | None:
    """TFLOP/s from (FLOPs, TFLOP/s) per shape; None for no shape or a zero throughput."""
    flops = time = 0.0
    for shape_flops, tflops in pairs:
        if tflops <= 0:
            return None
        flops += shape_flops
        time += shape_flops / tflops
    return flops / time if time else None


def summary(shapes: Sequence[Mapping[str, Any]], flops_key: str = "flops") -> dict[str, Any]:
    """The TAF-style figure and the best shape of measured rows (``shape``, ``tflops``,
    FLOPs under ``flops_key``; the same shape and transposes once)."""
    distinct: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for row in shapes:
        key = (tuple(row["shape"]), row.get("trans_a"), row.get("trans_b"))
        distinct.setdefault(key, row)
    rows = list(distinct.values())
    value = taf((float(r[flops_key]), float(r["tflops"])) for r in rows)
    best = max(rows, key=lambda r: r["tflops"]) if rows else None
    return {"taf_tflops": round(value, 4) if value is not None else None,
            "taf_shapes": len(rows),
            "best_shape": list(best["shape"]) if best else None,
            "best_shape_tflops": round(float(best["tflops"]), 4) if best else None,
            "taf_definition": DEFINITION}
