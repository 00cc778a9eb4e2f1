"""``imagebuild tune {shapes,gemm,rccl,verify}``: offline GEMM and RCCL tuning.

  shapes   the GEMM problems of a training step, in hipblaslt-bench terms, as a CSV:
           from a profiled step of the validation model here (--local), a profiler trace,
           a hipBLASLt LOG_MASK=32 log, a TunableOp untuned CSV, the model's dimensions
           (--model), or a command run under recording (-- CMD ...)
  gemm     tune those problems on this GPU (TunableOp and/or hipblaslt-bench) and write a
           tuning bundle: tuned files + tuning.json (image, library versions, GPU)
  rccl     collectives.csv from NCCL/RCCL debug logs; a tuner-plugin config from a sweep
  verify   check a bundle matches this image and GPU, and that it changes the kernels
"""

from __future__ import annotations

import argparse
import csv
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from imagebuild.tune.problem import ProblemStat, TuneError, read_csv, time_shares, write_csv


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune", help="offline GEMM and RCCL tuning (shapes, gemm, rccl, verify)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="tune_command", metavar="STEP", required=True)

    shapes = sub.add_parser("shapes", help="list a training step's GEMM problems as a CSV")
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
    shapes.add_argument("--vocab", type=int, default=None, help="vocabulary (--model)")
    shapes.add_argument("--fused-qkv", action="store_true",
                        help="--model: one qkv projection (Megatron-LM linear_qkv)")
    shapes.add_argument("--out", type=Path, default=Path("tuning/problems.csv"))
    shapes.add_argument("--show", type=int, default=20, help="rows to print (default 20)")
    shapes.add_argument("cmd", nargs=argparse.REMAINDER,
                        help="-- CMD ...: run CMD with TunableOp/hipBLASLt recording (GPU)")
    shapes.set_defaults(func=run_shapes)

    gemm = sub.add_parser("gemm", help="tune the problems on this GPU; write a bundle")
    gemm.add_argument("problems", type=Path, help="problems CSV from `tune shapes`")
    gemm.add_argument("--out", type=Path, default=Path("tuning/bundle"))
    gemm.add_argument("--method", choices=("auto", "tunableop", "hipblaslt"), default="auto")
    gemm.add_argument("--bench", default=None, help="hipblaslt-bench path")
    gemm.add_argument("--budget-s", type=float, default=3600.0, help="time budget (s)")
    gemm.add_argument("--iters", type=int, default=100)
    gemm.add_argument("--cold-iters", type=int, default=20)
    gemm.add_argument("--rotating-mb", type=int, default=512,
                      help="rotating buffer, larger than the GPU's cache (default 512)")
    gemm.add_argument("--top", type=int, default=0, help="only the N most important problems")
    gemm.add_argument("--image-digest", default=os.environ.get("IMAGEBUILD_IMAGE_DIGEST", ""))
    gemm.add_argument("--recipe", default=os.environ.get("IMAGEBUILD_RECIPE", ""))
    gemm.add_argument("--allow-cpu", action="store_true",
                      help="exit 0 when there is no GPU to tune on")
    gemm.set_defaults(func=run_gemm)

    rccl = sub.add_parser("rccl", help="collectives from NCCL/RCCL logs; tuner config")
    rccl.add_argument("logs", nargs="*", type=Path, help="NCCL_DEBUG=INFO logs")
    rccl.add_argument("--out", type=Path, default=Path("tuning/rccl"))
    rccl.add_argument("--sweep-results", type=Path, default=None,
                      help="CSV collective,bytes,algorithm,protocol,busbw_gbs[,nNodes,nRanks,"
                           "channels] -> nccl_tuner.conf")
    rccl.add_argument("--sweep", action="store_true", help="run the sweep here (GPU-only)")
    rccl.set_defaults(func=run_rccl)

    verify = sub.add_parser("verify", help="does a bundle match here, and take effect?")
    verify.add_argument("bundle", type=Path)
    verify.add_argument("--image-digest", default=os.environ.get("IMAGEBUILD_IMAGE_DIGEST"))
    verify.add_argument("--hipblaslt-git-version", default=None)
    verify.add_argument("--gpu-arch", default=None)
    verify.add_argument("--cu-count", type=int, default=None)
    verify.set_defaults(func=run_verify)


def print_problems(stats: list[ProblemStat], limit: int) -> None:
    print(f"{'m':>7} {'n':>7} {'k':>7} {'b':>3} tAtB {'type':6} {'count':>6} {'share':>7}")
    for stat, share in list(zip(stats, time_shares(stats), strict=True))[:limit]:
        p = stat.problem
        text = "-" if share is None else f"{share:.1%}"
        print(f"{p.m:>7} {p.n:>7} {p.k:>7} {p.batch_count:>3} {p.trans_a}{p.trans_b}   "
              f"{p.a_type:6} {stat.count:>6} {text:>7}")


def run_shapes(args: argparse.Namespace) -> int:
    from imagebuild.tune import record, sources, trace
    from imagebuild.tune.model import training_step_problems
    from imagebuild.validate.checks.llama import LLAMA_3_1_8B

    command = [c for c in args.cmd if c != "--"] if args.cmd else []
    info: dict[str, Any] = {}
    if command:
        stats, info = record.record_command(command, args.out.parent / "record")
    elif args.local:
        stats, info = record.record_local(args.out.parent / "record", seq=args.seq)
    elif args.model:
        config = LLAMA_3_1_8B if args.vocab is None else replace(LLAMA_3_1_8B,
                                                                 vocab_size=args.vocab)
        stats = training_step_problems(config, args.seq or 8192, fused_qkv=args.fused_qkv)
        info = {"derived": f"Llama-3.1-8B, vocab {config.vocab_size}, seq {args.seq or 8192}"}
    else:
        path = args.trace or args.hipblaslt_log or args.tunableop or args.file
        if path is None:
            raise TuneError("tune shapes: no source\nhint: --local, --trace FILE, "
                            "--hipblaslt-log FILE, --tunableop FILE, --model, or -- CMD")
        kind = "trace" if args.trace else "hipblaslt-log" if args.hipblaslt_log else \
            "tunableop" if args.tunableop else sources.detect_kind(path)
        if kind == "trace":
            stats, info = trace.problems_from_trace(path)
        elif kind == "hipblaslt-log":
            stats = sources.problems_from_hipblaslt_log(path)
        else:
            stats = sources.problems_from_tunableop_csv(path)
    write_csv(stats, args.out)
    print_problems(stats, args.show)
    for key, value in info.items():
        print(f"{key}: {value}")
    print(f"{len(stats)} problems, {sum(s.count for s in stats)} calls -> {args.out}")
    return 0


def run_gemm(args: argparse.Namespace) -> int:
    from imagebuild.tune.collect import bundle_from_run
    from imagebuild.validate.checks import tune_gemm

    read_csv(args.problems)  # a broken CSV fails here, with its line, before any GPU work
    argv = [str(args.problems), str(args.out), "--method", args.method, "--budget-s",
            str(args.budget_s), "--iters", str(args.iters), "--cold-iters",
            str(args.cold_iters), "--rotating-mb", str(args.rotating_mb), "--top",
            str(args.top)] + (["--bench", args.bench] if args.bench else [])
    tune_gemm.main(argv)
    facts = tune_gemm.gpu_facts()
    if facts["gpu"] is None:
        print("nothing tuned: GPU-only (no GPU visible to torch)")
        return 0 if args.allow_cpu else 1
    bundle = bundle_from_run(args.out, args.image_digest, args.recipe)
    print(f"bundle: {args.out} ({', '.join(bundle.files)}; {len(bundle.problems)} problems)")
    return 0


def run_rccl(args: argparse.Namespace) -> int:
    from imagebuild.tune import rccl

    if args.sweep:
        print("rccl sweep: skipped: GPU-only (run rccl-tests per algorithm/protocol on the "
              "nodes, then pass --sweep-results)")
    if args.logs:
        records = rccl.parse_logs(args.logs)
        rccl.write_collectives_csv(records, args.out / "collectives.csv")
        for r in records:
            print(f"{r.collective:14} {r.bytes:>12} B  x{r.calls:<5} {r.algorithm or '?'}/"
                  f"{r.protocol or '?'}")
        print(f"{len(records)} collectives -> {args.out / 'collectives.csv'}")
    if args.sweep_results:
        points = read_sweep(args.sweep_results)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "nccl_tuner.conf").write_text(rccl.tuner_config(points))
        print(f"tuner config -> {args.out / 'nccl_tuner.conf'} (NCCL_TUNER_CONFIG_FILE)")
    if not (args.logs or args.sweep_results or args.sweep):
        raise TuneError("tune rccl: nothing to do\nhint: pass NCCL_DEBUG=INFO log files "
                        "and/or --sweep-results CSV")
    return 0


def read_sweep(path: Path) -> list:
    from imagebuild.tune.rccl import SweepPoint

    points = []
    try:
        with path.open(newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), start=2):
                try:
                    points.append(SweepPoint(
                        row["collective"].lower(), int(row["bytes"]), row["algorithm"].lower(),
                        row["protocol"].lower(), float(row["busbw_gbs"]),
                        int(row.get("nNodes") or -1), int(row.get("nRanks") or -1),
                        int(row.get("channels") or -1)))
                except (KeyError, TypeError, ValueError) as exc:
                    raise TuneError(f"{path}:{line}: bad sweep row ({exc})\nhint: columns "
                                    "collective,bytes,algorithm,protocol,busbw_gbs") from None
    except OSError as exc:
        raise TuneError(f"{path}: cannot read: {exc.strerror}") from exc
    return points


def run_verify(args: argparse.Namespace) -> int:
    from imagebuild.tune.bundle import Target, check_match, read_bundle

    bundle = read_bundle(args.bundle)
    target = Target(args.image_digest or None, args.hipblaslt_git_version, None,
                    args.gpu_arch, args.cu_count)
    try:
        import torch

        target = replace(target, torch_version=torch.__version__)
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            target = replace(target, gpu_arch=target.gpu_arch or getattr(
                props, "gcnArchName", None), cu_count=target.cu_count or
                props.multi_processor_count)
    except ImportError:
        pass
    check_match(bundle, target, args.bundle)
    print(f"{args.bundle}: matches (image, torch, GPU as far as known here)")
    if target.cu_count is None:
        print("verify run: skipped: GPU-only (the before/after GEMM comparison needs the GPU)")
    return 0
