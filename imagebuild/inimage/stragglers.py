"""Stragglers: a rank whose own figure falls behind its peers'.

Checks that every rank runs on its own GPU (gemm, attention, hipblaslt) keep each rank's
figures under ``per_rank``. Each such figure of each rank is compared with the median of
the other ranks' (its peers'): a rank more than the margin below it is named, with its
host, its GPU (index, PCI address) and how much slower it is, and fails the check. A
synchronous training step cannot show this itself: the fast ranks wait for the slow one
in every collective, so all ranks' step times come out alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from statistics import median
from typing import Any

from .across_ranks import PER_RANK_FIGURES as PER_RANK_SPREAD
from .result import FAILED, CheckResult

GPU_MARGIN = 0.10
#: CPU ranks share the host's cores with whatever else runs there.
CPU_MARGIN = 0.5

#: Per-rank throughputs, by check: every TFLOP/s figure a rank measures for itself
#: (across_ranks.py), the worst GEMM shape and each attention pass among them, since one
#: slow kernel choice or one slow pass hides in an aggregate; not the GEMM's TAF-style
#: figure, a second aggregate of the same shapes (a rank slow there is slow in tflops).
PER_RANK_FIGURES: Mapping[str, tuple[str, ...]] = {
    check: tuple(f for f, higher in figures.items()
                 if higher and f.endswith("tflops") and f != "taf_tflops")
    for check, figures in PER_RANK_SPREAD.items()}


def _gpu(rank: Mapping[str, Any]) -> str:
    if rank.get("name") is None:
        return str(rank.get("device") or "cpu")
    where = rank.get("pci_bus_id") or rank.get("uuid")
    return f"GPU {rank.get('index')}" + (f" {where}" if where else "")


def find_stragglers(per_rank: Sequence[Mapping[str, Any]], figure: str, margin: float,
                    ranks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every rank whose ``figure`` is more than ``margin`` below its peers' median."""
    values = {int(r["rank"]): float(r[figure]) for r in per_rank
              if isinstance(r.get(figure), (int, float)) and not isinstance(r.get(figure), bool)}
    if len(values) < 2:
        return []
    info = {int(r["rank"]): r for r in ranks}
    found = []
    for rank, value in sorted(values.items()):
        peers = median([v for r, v in values.items() if r != rank])
        if peers <= 0:
            continue
        slower = 1 - value / peers
        if slower > margin:
            found.append({"rank": rank, "host": info.get(rank, {}).get("host"),
                          "gpu": _gpu(info.get(rank, {})), "figure": figure, "value": value,
                          "peers_median": peers, "slower_by": round(slower, 4)})
    return found


def judge_stragglers(result: CheckResult, ranks: Sequence[Mapping[str, Any]],
                     margin: float) -> CheckResult:
    """``result`` with ``stragglers`` in its figures, failed when there is one."""
    figures_of = PER_RANK_FIGURES.get(result.name)
    per_rank = result.figures.get("per_rank")
    if not figures_of or not isinstance(per_rank, list) or len(per_rank) < 2:
        return result
    found = [s for figure in figures_of for s in find_stragglers(per_rank, figure, margin, ranks)]
    figures = {**result.figures, "stragglers": found, "straggler_margin": margin}
    if not found:
        return replace(result, figures=figures)
    named = "; ".join(
        f"straggler rank {s['rank']} ({s['host']}, {s['gpu']}): {result.name}.{s['figure']} "
        f"{s['value']:.4g} is {s['slower_by']:.0%} below its peers' median "
        f"{s['peers_median']:.4g} (margin {margin:.0%})" for s in found)
    reason = named if result.status != FAILED else f"{result.reason}; {named}"
    return replace(result, status=FAILED, cause=None, reason=reason, figures=figures)
