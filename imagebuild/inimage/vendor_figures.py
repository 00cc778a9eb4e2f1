"""What the vendors and sites publish a GPU model should do, judged only like with like.

gpus.json's ``vendor_figures`` holds, per GPU model, the floors of AMD's Cluster
Validation Suite, CSCS's ReFrame references and published measurements, each with its
source and the configuration it was measured in (``when``: precision, sequence, batch,
parallelism, GPUs and nodes for a training figure; operation, size, nodes and ranks for
a collective). A check's figure is held to one only when the run matches every key of
``when``; otherwise the check's ``figures.vendor_figures`` lists it as not comparable,
saying which key differs, so a reader sees what the vendor expects without a verdict
drawn from a different run. kind ``floor``: below it fails the check; ``reference``
(ReFrame's tuple): below value x (1 + lower) fails, above value x (1 + upper) is noted;
``published``: shown beside ours, never a verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from .result import FAILED, CheckResult

KINDS = ("floor", "reference", "published")


def for_gpu(data: Mapping[str, Any], model: str | None) -> list[dict[str, Any]]:
    """The entries of ``model`` (none for an unknown GPU or CPU mode)."""
    if not model:
        return []
    return [e for e in data.get("vendor_figures", []) if model in e.get("gpus", [])]


def _megatron_setup(figures: Mapping[str, Any], nodes: int) -> dict[str, Any]:
    setup = dict(figures.get("configuration") or {})
    model = setup.get("model") or {}
    layers = model.get("layers") if isinstance(model, Mapping) else None
    return {**setup, "model": "Llama-3.1-8B" if layers == 32 else setup.get("model"),
            "workload": figures.get("workload"), "precision": figures.get("precision"),
            "nodes": nodes, "fsdp": False}


def measured(entry: Mapping[str, Any], figures: Mapping[str, Any], nodes: int
             ) -> tuple[float | None, str | None]:
    """(this run's value of the entry's figure, None) or (None, why not comparable)."""
    when = entry.get("when", {})
    check = entry["check"]
    if check == "collectives":
        setup = {"op": when.get("op"), "bytes": when.get("bytes"), "nodes": nodes,
                 "world_size": figures.get("world_size")}
        row = next((r for r in figures.get("results", [])
                    if r.get("op") == when.get("op") and r.get("requested_bytes") == when.get(
                        "bytes") and r.get("source", "size sweep") == "size sweep"), None)
        if row is None:
            return None, f"no {when.get('op')} of {when.get('bytes')} B was measured"
        value = row.get("busbw_gbps")
    elif check == "rccl_tests":
        result = (figures.get("results") or {}).get(entry["figure"].split("_busbw")[0], {})
        gpus = figures.get("configuration", {}).get("gpus") if isinstance(
            figures.get("configuration"), Mapping) else None
        # rccl-tests run on each node alone (one process drives its GPUs): one node.
        setup = {"bytes": result.get("largest_bytes"), "nodes": 1, "gpus_per_node": gpus}
        value = figures.get(entry["figure"])
    elif check == "megatron":
        setup = _megatron_setup(figures, nodes)
        value = figures.get(entry["figure"])
    else:
        return None, f"no rule for check {check}"
    differs = [f"{key} {setup.get(key)!r}, not {want!r}" for key, want in when.items()
               if key not in ("op",) and setup.get(key) != want]
    if differs:
        return None, "this run's " + "; ".join(differs)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None, f"no {entry['figure']} in this run's figures"
    return float(value), None


def judge(entry: Mapping[str, Any], value: float) -> tuple[str, str]:
    """(verdict, text) of ``value`` against one entry."""
    kind, target, unit = entry["kind"], float(entry["value"]), entry.get("unit", "")
    if kind == "published":
        return "shown", f"{value:g} {unit}; {entry['by']} published {target:g}"
    low = target * (1 + float(entry.get("lower") or 0.0))
    if value < low:
        return FAILED, (f"{value:g} {unit} below {entry['by']}'s {kind} {low:g} "
                        f"({target:g}{'' if kind == 'floor' else ' ' + format(entry['lower'], '+')})")
    text = f"{value:g} {unit}, at least {entry['by']}'s {kind} {low:g}"
    if entry.get("upper") is not None and value > target * (1 + float(entry["upper"])):
        text += (f"; above the reference's upper bound {target * (1 + entry['upper']):g} "
                 "(faster is not a fault here)")
    return "passed", text


def judge_vendor_figures(result: CheckResult, entries: Sequence[Mapping[str, Any]],
                         nodes: int) -> CheckResult:
    """``result`` with ``figures.vendor_figures`` (every entry of its check: its verdict
    or why it does not apply) and failed when a floor or reference that applies is not
    met."""
    mine = [e for e in entries if e["check"] == result.name]
    if not mine or result.status == "skipped":
        return result
    rows, problems = [], []
    for entry in mine:
        value, why = measured(entry, result.figures, nodes)
        row = {"figure": f"{entry['check']}.{entry['figure']}", "kind": entry["kind"],
               "vendor_value": entry["value"], "unit": entry.get("unit"),
               "by": entry["by"], "source": entry["source"], "url": entry.get("url")}
        if why:
            rows.append({**row, "applies": False, "why": why})
            continue
        assert value is not None
        verdict, text = judge(entry, value)
        rows.append({**row, "applies": True, "value": value, "verdict": verdict,
                     "text": text})
        if verdict == FAILED:
            problems.append(f"{row['figure']} {text}")
    figures = {**result.figures, "vendor_figures": rows}
    if not problems:
        return replace(result, figures=figures)
    reason = "; ".join(problems) + (f" (measured: {result.reason})" if result.status != FAILED
                                    else f"; {result.reason}")
    return replace(result, status=FAILED, reason=reason[:900], figures=figures)
