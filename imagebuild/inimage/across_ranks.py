"""Every rank's figures, not rank 0's: the spread of each per-rank figure across the ranks.

Checks that every rank runs on its own GPU (gemm, attention, hipblaslt) keep each rank's
figures under ``per_rank``; the figures on top are rank 0's. A job runs at the pace of its
slowest rank, so what references, floors and the history hold a per-rank figure to is its
worst value across the ranks (the minimum, or the maximum for a lower-is-better figure),
named with the rank and host that gave it; the median is kept beside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from statistics import median
from typing import Any

from .result import CheckResult

#: Scalar figures each rank measures for itself, by check: figure -> higher is better.
PER_RANK_FIGURES: Mapping[str, Mapping[str, bool]] = {
    "gemm": {"tflops": True, "fraction_of_peak": True, "worst_shape_tflops": True,
             "worst_shape_fraction_of_peak": True, "taf_tflops": True},
    "attention": {"fwd_bwd_tflops": True, "fwd_tflops": True, "bwd_tflops": True,
                  "fraction_of_peak": True, "bwd_fwd_time_ratio": False},
    "hipblaslt": {"tflops": True, "fraction_of_peak": True},
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def rank_values(figures: Mapping[str, Any], path: str) -> list[tuple[int, str | None, float]]:
    """(rank, host, value) of figure ``path`` for every rank that measured it; empty when
    the figures hold no ``per_rank`` list."""
    per_rank = figures.get("per_rank")
    if not isinstance(per_rank, list):
        return []
    found: list[tuple[int, str | None, float]] = []
    for entry in per_rank:
        value: Any = entry
        for key in path.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
        if _number(value):
            found.append((int(entry.get("rank", len(found))), entry.get("host"), float(value)))
    return found


def spread(values: Sequence[tuple[int, str | None, float]], higher_is_better: bool
           ) -> dict[str, Any]:
    """The worst value (with its rank and host), the median and the best of ``values``."""
    ordered = sorted(values, key=lambda v: v[2], reverse=not higher_is_better)
    worst, best = ordered[0], ordered[-1]
    return {"worst": worst[2], "rank": worst[0], "host": worst[1],
            "median": round(median([v[2] for v in values]), 6), "best": best[2],
            "min": min(v[2] for v in values), "max": max(v[2] for v in values),
            "ranks": len(values), "higher_is_better": higher_is_better}


def summarize_ranks(result: CheckResult) -> CheckResult:
    """``result`` with ``across_ranks`` (figure -> spread) in its figures, and the worst
    rank of its headline figure named in its reason, when more than one rank measured it."""
    which = PER_RANK_FIGURES.get(result.name, {})
    summary = {}
    for figure, higher in which.items():
        values = rank_values(result.figures, figure)
        if len(values) > 1:
            summary[figure] = spread(values, higher)
    if not summary:
        return result
    headline = next(iter(summary))
    head = summary[headline]
    note = (f"{result.name}.{headline} across {head['ranks']} ranks: worst {head['worst']:.4g} "
            f"(rank {head['rank']}, {head['host']}), median {head['median']:.4g}")
    return replace(result, figures={**result.figures, "across_ranks": summary},
                   reason=f"{result.reason}; {note}")
