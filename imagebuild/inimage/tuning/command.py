"""``imagebuild tune {shapes,gemm,verify}``: the steps of offline GEMM tuning that run where
the training runs, in the image (its ``imagebuild`` shim runs this package) or on the host
(``imagebuild tune`` calls the same functions).

  shapes   the GEMM problems of a training step, in hipblaslt-bench terms, as a CSV: from
           a profiled step of the validation model here (--local), a profiler trace, a
           hipBLASLt LOG_MASK=32 log, a TunableOp untuned CSV, the model's dimensions
           (--model), or a command run under recording (-- CMD ...)
  gemm     tune those problems on this GPU (TunableOp and/or hipblaslt-bench) and write a
           tuning bundle: tuned files + tuning.json (recipe, library versions, GPU)
  verify   the bundle matches this image and GPU, and GEMMs run without and with it show
           that it is in effect (per-problem TFLOP/s and speed-up; GPU-only)
  rccl-sweep
           rccl-tests for every algorithm and protocol, forced in turn, over the sizes of
           collectives.csv on this node's GPUs: sweep.csv for `imagebuild tune rccl
           --sweep-results` (GPU-only)

Standard library and torch only, like every in-image check.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from .gemm_tuner import add_gemm_arguments, run_gemm
from .problems import ProblemError, ProblemStat, time_shares, write_csv
from .rccl_sweep import add_rccl_sweep_arguments, run_rccl_sweep

DEFAULT_PROBLEMS = "tuning/problems.csv"


def add_shapes_arguments(shapes: argparse.ArgumentParser) -> None:
    source = shapes.add_mutually_exclusive_group()
    source.add_argument("--local", action="store_true",
                        help="profile one training step of the validation model here")
    source.add_argument("--trace", type=Path, help="PyTorch profiler / Chrome trace JSON")
    source.add_argument("--hipblaslt-log", type=Path, help="HIPBLASLT_LOG_MASK=32 output")
    source.add_argument("--tunableop", type=Path, help="TunableOp untuned or results CSV")
    source.add_argument("--model", choices=("llama-3.1-8b",),
                        help="derive the problems from the model's dimensions")
    source.add_argument("--file", type=Path, help="any of the above files (detected)")
    shapes.add_argument("--seq", type=int, default=None, help="sequence length (--model, "
                        "--local)")
    shapes.add_argument("--layers", type=int, default=None,
                        help="--local: transformer blocks to profile (every block runs the "
                             "same GEMMs; default 2 on a GPU, the CPU smoke model's on CPU)")
    shapes.add_argument("--vocab", type=int, default=None, help="vocabulary (--model)")
    shapes.add_argument("--fused-qkv", action="store_true",
                        help="--model: one qkv projection (Megatron-LM linear_qkv)")
    shapes.add_argument("--out", type=Path, default=Path(DEFAULT_PROBLEMS),
                        help=f"problems CSV to write (default {DEFAULT_PROBLEMS})")
    shapes.add_argument("--show", type=int, default=20, help="rows to print (default 20)")
    shapes.add_argument("cmd", nargs=argparse.REMAINDER,
                        help="-- CMD ...: run CMD with TunableOp/hipBLASLt recording (GPU)")


def print_problems(stats: list[ProblemStat], limit: int) -> None:
    print(f"{'m':>7} {'n':>7} {'k':>7} {'b':>3} tAtB {'type':6} {'count':>6} {'share':>7}")
    for stat, share in list(zip(stats, time_shares(stats), strict=True))[:limit]:
        p = stat.problem
        text = "-" if share is None else f"{share:.1%}"
        print(f"{p.m:>7} {p.n:>7} {p.k:>7} {p.batch_count:>3} {p.trans_a}{p.trans_b}   "
              f"{p.a_type:6} {stat.count:>6} {text:>7}")


def shapes(args: argparse.Namespace) -> tuple[list[ProblemStat], dict[str, Any]]:
    """The problems the arguments point at (ProblemError when there are none)."""
    from ..model.llama_config import LLAMA_3_1_8B
    from . import library_logs, record, trace
    from .step_problems import training_step_problems

    command = [c for c in args.cmd if c != "--"] if args.cmd else []
    if command:
        return record.record_command(command, args.out.parent / "record")
    if args.local:
        return record.record_local(args.out.parent / "record", seq=args.seq,
                                        layers=args.layers)
    if args.model:
        config = LLAMA_3_1_8B if args.vocab is None else replace(LLAMA_3_1_8B,
                                                                 vocab_size=args.vocab)
        seq = args.seq or 8192
        return (training_step_problems(config, seq, fused_qkv=args.fused_qkv),
                {"derived": f"Llama-3.1-8B, vocab {config.vocab_size}, seq {seq}"})
    path = args.trace or args.hipblaslt_log or args.tunableop or args.file
    if path is None:
        raise ProblemError("tune shapes: no source\nhint: --local, --trace FILE, "
                           "--hipblaslt-log FILE, --tunableop FILE, --model, or -- CMD")
    kind = "trace" if args.trace else "hipblaslt-log" if args.hipblaslt_log else \
        "tunableop" if args.tunableop else library_logs.detect_kind(path)
    if kind == "trace":
        return trace.problems_from_trace(path)
    if kind == "hipblaslt-log":
        return library_logs.problems_from_hipblaslt_log(path), {}
    return library_logs.problems_from_tunableop_csv(path), {}


def run_shapes(args: argparse.Namespace) -> int:
    stats, info = shapes(args)
    write_csv(stats, args.out)
    print_problems(stats, args.show)
    for key, value in info.items():
        print(f"{key}: {value}")
    print(f"{len(stats)} problems, {sum(s.count for s in stats)} calls -> {args.out}")
    return 0


def add_verify_arguments(verify: argparse.ArgumentParser) -> None:
    verify.add_argument("bundle", type=Path, help="tuning bundle directory (tuning.json)")
    verify.add_argument("--json", type=Path, default=None,
                        help="write the per-problem figures here as JSON")
    verify.add_argument("--allow-cpu", action="store_true",
                        help="exit 0 when the GPU comparison was skipped (no GPU)")


def run_verify(args: argparse.Namespace) -> int:
    """Match the bundle against this environment, then compare GEMMs without and with it."""
    import json

    from ..checks.tuning_in_effect import verify_here

    status, reason, figures = verify_here(args.bundle)
    for line in figures.get("table", []):
        print(line)
    print(f"{status}: {reason}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    if status == "passed" or (status == "skipped" and args.allow_cpu):
        return 0
    return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="imagebuild tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="step", metavar="STEP", required=True)
    add_shapes_arguments(sub.add_parser("shapes", help="a training step's GEMM problems"))
    add_gemm_arguments(sub.add_parser("gemm", help="tune the problems on this GPU; write a "
                                                   "bundle"))
    add_verify_arguments(sub.add_parser("verify", help="is a bundle in effect here?"))
    add_rccl_sweep_arguments(sub.add_parser("rccl-sweep", help="rccl-tests per algorithm and "
                                                               "protocol: sweep.csv"))
    return parser


def run_rccl_sweep_step(args: argparse.Namespace) -> int:
    sweep_csv = run_rccl_sweep(args)
    if sweep_csv is not None:
        print(f"next: imagebuild tune rccl --sweep-results {sweep_csv} (the tuner config)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    steps = {"shapes": run_shapes, "gemm": run_gemm, "verify": run_verify,
             "rccl-sweep": run_rccl_sweep_step}
    try:
        return steps[args.step](args)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
