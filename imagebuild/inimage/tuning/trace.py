"""GEMM problems from a PyTorch profiler trace (Chrome trace JSON, as written by
``torch.profiler.profile(record_shapes=True).export_chrome_trace`` and opened by Perfetto).

CPU ops carry "Input Dims", "Input type" and, in newer torch, "Input Strides". On a GPU trace
each kernel event carries the "External id" of the CPU op that launched it; a GEMM's time is
the sum of its kernels. A CPU-only trace has no kernels: the op's own duration is its time.
Besides torch's own GEMM ops (torch_ops.py), a trace of a Megatron-LM + TransformerEngine
step holds TE's GEMM ops and hipBLASLt's markers (te_trace.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from .problems import ProblemError, ProblemStat, aggregate
from .te_trace import te_problems
from .torch_ops import LEAF_GEMMS, RecordedOp, to_problem

_KERNEL_CATEGORIES = ("kernel", "gpu_op")


def load_events(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read trace: {exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{path}: not a Chrome trace JSON file ({exc})\n"
                        "hint: export with prof.export_chrome_trace(PATH); Perfetto's binary "
                        ".pftrace is not read") from exc
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise ProblemError(f"{path}: traceEvents: expected a list of events")
    return [e for e in events if isinstance(e, dict)]


def _annotate(events: list[dict[str, Any]]) -> list[tuple[dict[str, Any], bool, bool]]:
    """Each complete CPU event with (in backward, under aten::linear), from nesting on its
    thread: an event encloses those that start and end inside it."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for event in events:
        if event.get("ph") == "X" and event.get("cat") not in _KERNEL_CATEGORIES \
                and "dur" in event:
            by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    annotated = []
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
        stack: list[tuple[float, bool, bool]] = []  # (end, backward, linear) of ancestors
        for event in thread_events:
            start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
            while stack and stack[-1][0] <= start:
                stack.pop()
            backward = bool(stack and stack[-1][1])
            linear = bool(stack and stack[-1][2])
            annotated.append((event, backward, linear))
            name = str(event.get("name", ""))
            stack.append((end, backward or "Backward" in name,
                          linear or name == "aten::linear"))
    return annotated


def _dims(value: Any) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    return tuple(tuple(int(x) for x in item) if isinstance(item, list) else () for item in value)


def problems_from_events(events: list[dict[str, Any]], origin: str = "trace") \
        -> tuple[list[ProblemStat], dict[str, Any]]:
    """(aggregated problems, summary) of every leaf GEMM op in the trace."""
    kernel_time: dict[Any, float] = {}
    for event in events:
        if event.get("cat") in _KERNEL_CATEGORIES and event.get("ph") == "X":
            ext = (event.get("args") or {}).get("External id")
            kernel_time[ext] = kernel_time.get(ext, 0.0) + float(event.get("dur", 0.0))
    annotated = _annotate(events)
    weights = frozenset(
        (dims[1][0], dims[1][1]) for event, _, _ in annotated
        if event.get("name") == "aten::linear"
        and len(dims := _dims((event.get("args") or {}).get("Input Dims"))) > 1
        and len(dims[1]) == 2)
    stats: list[ProblemStat] = []
    counts = {"gemm_ops": 0, "assumed_transposes": 0, "with_strides": 0}
    for event, backward, linear in annotated:
        if event.get("name") not in LEAF_GEMMS:
            continue
        args = event.get("args") or {}
        strides = args.get("Input Strides")
        op = RecordedOp(str(event["name"]), _dims(args.get("Input Dims")),
                        _dims(strides) if strides is not None else None,
                        tuple(str(t) for t in args.get("Input type") or ()), backward, linear)
        converted = to_problem(op, weights)
        if converted is None:
            continue
        problem, assumed = converted
        counts["gemm_ops"] += 1
        counts["assumed_transposes"] += int(assumed)
        counts["with_strides"] += int(strides is not None)
        time = kernel_time.get(args.get("External id")) if kernel_time \
            else float(event.get("dur", 0.0))
        stats.append(ProblemStat(problem, 1, time, origin))
    te_stats, te_counts = te_problems(events, kernel_time)
    stats += te_stats
    summary: dict[str, Any] = {**counts, **{k: v for k, v in te_counts.items() if v},
                               "timing": "kernels" if kernel_time else "cpu op duration"}
    return aggregate(stats), summary


def problems_from_trace(path: Path) -> tuple[list[ProblemStat], dict[str, Any]]:
    stats, summary = problems_from_events(load_events(path), origin="trace")
    if not stats:
        raise ProblemError(f"{path}: no GEMM op with recorded shapes (aten::mm, addmm, bmm, "
                           "baddbmm; TransformerEngine's tex_ts::te_gemm_ts) and no hipBLASLt "
                           "marker\nhint: profile with torch.profiler.profile(record_shapes="
                           "True); for TransformerEngine 2.x record HIPBLASLT_LOG_MASK=32 and "
                           "read the log with --hipblaslt-log")
    return stats, summary
