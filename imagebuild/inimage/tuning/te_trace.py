"""GEMM problems of TransformerEngine in a profiler trace: TE's own GEMM ops, and the
hipBLASLt calls under them.

- TE's GEMM op. TransformerEngine 1.x runs every GEMM of its modules through the TorchScript
  op ``tex_ts::te_gemm_ts`` (``transformer_engine/pytorch/csrc/ts_fp8_op.cpp``, called by
  ``cpp_extensions/gemm.py``'s ``gemm`` and ``fp8_gemm``), so a trace recorded with
  ``record_shapes=True`` has one ``cpu_op`` event per GEMM whose "Input Dims" and
  "Concrete Inputs" are its arguments: A (0), A_type (3), transa (4), B (5), transb (9),
  D (10), D_type (12), bias (14), pre_gelu_out (16), grad (17). TE's ``nvte_cublas_gemm``
  (``common/gemm/cublaslt_gemm.cu``, the hipBLASLt path on ROCm) turns them into the
  column-major problem hipBLASLt runs: m = A[0] if transa else A[1], k = A[1] if transa
  else A[0], n = B[1] if transb else B[0]; types by TE's DType enum
  (``transformer_engine.h``: 3 float32, 4 float16, 5 bfloat16, 6 float8e4m3, 7 float8e5m2).
  Its time is that of the kernels launched under it (their "External id").
- hipBLASLt's own record. With ``HIPBLASLT_ENABLE_MARKER=2`` hipBLASLt (>= 0.12, ROCm 6.4)
  pushes, for every matmul, a ROCTx range named by the call's hipblaslt-bench command line
  (``--api_method c -m .. -n .. -k .. --transA .. --batch_count .. --a_type ..``, the line
  ``HIPBLASLT_LOG_MASK=32`` logs; rocm-libraries ``projects/hipblaslt/library/src/
  amd_detail/rocblaslt/src/tensile_host.cpp``, logBenchFromTensileDataGemm). Where a trace
  carries such ranges (a tracer that records ROCTx ranges into the trace), each is one call;
  under a TE op it is what that op ran, and it is taken over TE's rule when they differ.
  TransformerEngine 2.x calls hipBLASLt from the pybind11 function ``generic_gemm``, not a
  torch op, so its GEMMs are in a trace only through these ranges (or in a
  ``HIPBLASLT_LOG_MASK=32`` log: ``tune shapes --hipblaslt-log``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .library_logs import parse_bench_line
from .problems import GemmProblem, ProblemStat, compute_type_for

TE_GEMM_OPS = frozenset({"tex_ts::te_gemm_ts"})
#: TransformerEngine's DType enum -> hipBLASLt datatype (kNVTEByte/Int32/Int64 are not GEMM
#: operand types).
TE_DTYPES = {3: "f32_r", 4: "f16_r", 5: "bf16_r", 6: "f8_r", 7: "bf8_r"}
#: te_gemm_ts's argument positions.
ARG_A, ARG_A_TYPE, ARG_TRANSA, ARG_B, ARG_B_TYPE, ARG_TRANSB = 0, 3, 4, 5, 8, 9
ARG_D_TYPE, ARG_BIAS = 12, 14


def marker_problem(name: str) -> GemmProblem | None:
    """The problem of a hipBLASLt marker: an event named by a hipblaslt-bench command line
    (with or without the program name in front)."""
    if "--api_method" not in name and "hipblaslt-bench" not in name:
        return None
    return parse_bench_line(name if "hipblaslt-bench" in name else f"hipblaslt-bench {name}")


def _dims(value: Any, index: int) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in value[index])
    except (IndexError, TypeError, ValueError):
        return ()


def _int(concrete: Any, index: int) -> int | None:
    try:
        return int(concrete[index])
    except (IndexError, TypeError, ValueError):
        return None


def te_gemm_problem(args: dict[str, Any]) -> tuple[GemmProblem, bool] | None:
    """(hipBLASLt problem, has a bias) of one te_gemm_ts event's arguments, by TE's rules;
    None when the event lacks what they need (recorded without record_shapes, or an empty
    operand: TE then zeroes the output and runs no GEMM)."""
    dims, concrete = args.get("Input Dims"), args.get("Concrete Inputs")
    a, b = _dims(dims, ARG_A), _dims(dims, ARG_B)
    transa, transb = _int(concrete, ARG_TRANSA), _int(concrete, ARG_TRANSB)
    if len(a) != 2 or len(b) != 2 or transa is None or transb is None or 0 in a + b:
        return None
    a_type = TE_DTYPES.get(_int(concrete, ARG_A_TYPE) or -1)
    b_type = TE_DTYPES.get(_int(concrete, ARG_B_TYPE) or -1, a_type)
    d_type = TE_DTYPES.get(_int(concrete, ARG_D_TYPE) or -1, a_type)
    if a_type is None:
        return None
    m = a[0] if transa else a[1]
    k = a[1] if transa else a[0]
    n = b[1] if transb else b[0]
    has_bias = bool(_dims(dims, ARG_BIAS) and 0 not in _dims(dims, ARG_BIAS))
    problem = GemmProblem(m, n, k, 1, "T" if transa else "N", "T" if transb else "N",
                          a_type, b_type or a_type, d_type or a_type, d_type or a_type,
                          compute_type_for(a_type))
    return problem, has_bias


def _complete(events: Iterable[dict[str, Any]]) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    """Complete CPU-side events by thread, each thread's in start order (outer first)."""
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for event in events:
        if event.get("ph") == "X" and "dur" in event and "ts" in event \
                and event.get("cat") not in ("kernel", "gpu_op", "gpu_memcpy", "gpu_memset"):
            by_thread.setdefault((event.get("pid"), event.get("tid")), []).append(event)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (float(e["ts"]), -float(e["dur"])))
    return by_thread


def te_problems(events: list[dict[str, Any]], kernel_time: dict[Any, float]
                ) -> tuple[list[ProblemStat], dict[str, int]]:
    """One ProblemStat per TE GEMM op and per hipBLASLt marker outside one, with counts
    for the summary."""
    counts = {"te_gemm_ops": 0, "hipblaslt_markers": 0, "markers_under_te_ops": 0,
              "te_rule_differs_from_marker": 0, "with_bias": 0}
    stats: list[ProblemStat] = []
    for thread_events in _complete(events).values():
        stack: list[tuple[float, dict[str, Any] | None]] = []  # (end, enclosing TE op)
        under: dict[int, list[GemmProblem]] = {}
        ops: list[dict[str, Any]] = []
        for event in thread_events:
            start, end = float(event["ts"]), float(event["ts"]) + float(event["dur"])
            while stack and stack[-1][0] <= start:
                stack.pop()
            enclosing = stack[-1][1] if stack else None
            name = str(event.get("name", ""))
            if name in TE_GEMM_OPS:
                ops.append(event)
                stack.append((end, event))
                continue
            marked = marker_problem(name)
            if marked is not None:
                counts["hipblaslt_markers"] += 1
                if enclosing is not None:
                    counts["markers_under_te_ops"] += 1
                    under.setdefault(id(enclosing), []).append(marked)
                else:
                    stats.append(ProblemStat(marked, 1, None, "hipblaslt-marker"))
            stack.append((end, enclosing))
        for op in ops:
            args = op.get("args") or {}
            found = te_gemm_problem(args)
            markers = under.get(id(op), [])
            if found is None and not markers:
                continue
            counts["te_gemm_ops"] += 1
            problem = markers[0] if markers else found[0]  # type: ignore[index]
            if found is not None:
                counts["with_bias"] += int(found[1])
                if markers and _key(markers[0]) != _key(found[0]):
                    counts["te_rule_differs_from_marker"] += 1
            time = kernel_time.get(args.get("External id")) if kernel_time \
                else float(op.get("dur", 0.0))
            stats.append(ProblemStat(problem, 1, time, "te-gemm"))
    return stats, counts


def _key(problem: GemmProblem) -> tuple[Any, ...]:
    return (problem.m, problem.n, problem.k, problem.batch_count, problem.trans_a,
            problem.trans_b, problem.a_type)
