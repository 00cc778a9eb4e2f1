"""Offline GEMM tuning on this GPU, one problem at a time.

Reads a problems CSV (``imagebuild tune shapes``) and tunes each problem with
- PyTorch TunableOp (torch >= 2.6: ``torch.cuda.tunable.tune_gemm_in_file``; on NVIDIA the
  only solution is cuBLAS' default, so it exercises the plumbing only), writing
  ``tunableop_results0.csv``; and/or
- ``hipblaslt-bench`` with ``HIPBLASLT_TUNING_FILE`` (hipBLASLt >= 0.12, ROCm 6.4), which
  writes the override file itself: ``Git Version`` line, then one row per winner; or
- hipBLASLt's own ``find_exact.py`` (``--find-exact``, find_exact.py and find_exact_run.py),
  whose winners become the same override file.
Timing settings: a rotating buffer of twice the GPU's last-level cache (gemm_facts.py),
cold iterations before the timed ones. Results go to ``gemm_tuning.json`` after every
problem, so Ctrl-C or a job's time limit keeps what is done. When a GPU tuned anything,
OUT_DIR becomes a tuning bundle (gemm_bundle.py).

    imagebuild tune gemm PROBLEMS.csv --out OUT_DIR [--method ...|--find-exact]
    python -m imagebuild.inimage.tuning.gemm_tuner PROBLEMS.csv --out OUT_DIR
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .bench import bench_argv, parse_results, parse_winner, tunableop_line
from .bundle_format import Bundle, only_defaults
from .find_exact import Settings
from .find_exact_tune import tune_find_exact
from .gemm_args import add_gemm_arguments
from .gemm_args import build_parser as _build_parser
from .gemm_bundle import (
    OVERRIDE,
    PROBLEM_KEYS,
    RESULTS,
    TUNABLEOP,
    bundle_from_run,
    save,
)
from .gemm_facts import (
    default_bench,
    gpu_facts,
    hipblaslt_revision,
    image_recipe,
    rotating_mb,
    skip_reason,
    tunableop_validators,
)
from .problems import ProblemError, read_csv

__all__ = ["OVERRIDE", "PROBLEM_KEYS", "RESULTS", "TUNABLEOP", "add_gemm_arguments",
           "bundle_from_run", "default_bench", "gpu_facts", "run_gemm", "tunableop_result"]


def read_problems(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def build_parser() -> argparse.ArgumentParser:
    return _build_parser(__doc__.splitlines()[0])


def tune_hipblaslt(problems: list[dict[str, str]], out: Path, bench: str, record: dict,
                   deadline: float, iters: int, cold: int, rotating: int) -> None:
    env = dict(os.environ, HIPBLASLT_TUNING_FILE=str(out / OVERRIDE))
    env.pop("HIPBLASLT_TUNING_OVERRIDE_FILE", None)  # never measure "before" with an override
    for i, problem in enumerate(problems, start=1):
        left = deadline - time.monotonic()
        if left <= 0:
            record["stopped"] = f"time budget spent after {i - 1} of {len(problems)} problems"
            return
        label = f"[{i}/{len(problems)}] m={problem['m']} n={problem['n']} k={problem['k']} " \
                f"{problem['transA']}{problem['transB']}"
        entry: dict[str, Any] = {k: problem[k] for k in ("m", "n", "k", "batch_count",
                                                         "transA", "transB", "a_type")}
        default = subprocess.run(
            bench_argv(bench, problem, iters, cold, rotating, "heuristic")
            + ["--requested_solution", "1"], capture_output=True, text=True, check=False,
            timeout=max(left, 1), env={k: v for k, v in env.items()
                                       if k != "HIPBLASLT_TUNING_FILE"})
        results = parse_results(default.stdout)
        if results:
            entry["before_gflops"], entry["before_solution"] = results[0]
        tuned = subprocess.run(bench_argv(bench, problem, iters, cold, rotating),
                               capture_output=True, text=True, check=False,
                               timeout=max(deadline - time.monotonic(), 1), env=env)
        winner = parse_winner(tuned.stdout)
        if winner is None:
            entry["error"] = (tuned.stdout + tuned.stderr).strip().splitlines()[-3:]
        else:
            entry.update(after_gflops=winner.gflops, after_us=winner.us,
                         solution_index=winner.solution_index)
        record["problems"].append(entry)
        save(out, record)
        print(f"{label}: {entry.get('after_gflops', 'failed')} GFLOP/s "
              f"(default {entry.get('before_gflops', '?')})", flush=True)


def tune_tunableop(problems: list[dict[str, str]], out: Path, record: dict, deadline: float,
                   iters: int, rotating: int) -> None:
    from torch.cuda import tunable

    tunable.enable(True)
    tunable.tuning_enable(True)
    tunable.set_filename(str(out / TUNABLEOP), insert_device_ordinal=False)
    tunable.set_max_tuning_iterations(iters)
    tunable.set_rotating_buffer_size(rotating)
    for i, problem in enumerate(problems, start=1):
        if time.monotonic() >= deadline:
            record["stopped"] = f"time budget spent after {i - 1} of {len(problems)} problems"
            return
        line = tunableop_line(problem)
        single = out / "untuned_one.csv"
        single.write_text(line + "\n")
        began = time.monotonic()
        tunable.tune_gemm_in_file(str(single))
        # torch <= 2.9 keeps results in memory until write_file(); newer torch writes each
        # tuned GEMM at once and has no write_file (pytorch/pytorch#163965).
        write_file = getattr(tunable, "write_file", None)
        if write_file is not None:
            write_file()
        entry: dict[str, Any] = {key: problem[key] for key in PROBLEM_KEYS}
        entry.update(method="tunableop", tunableop=line,
                     tuning_s=round(time.monotonic() - began, 2))
        found = tunableop_result(line, tunable.get_results())
        if found is not None:
            entry["tunableop_solution"], entry["after_us"] = found
        record["problems"].append(entry)
        save(out, record)
        print(f"[{i}/{len(problems)}] {line}: {entry.get('tunableop_solution', 'no result')}",
              flush=True)
    (out / "untuned_one.csv").unlink(missing_ok=True)


def tunableop_result(line: str, results: Any) -> tuple[str, float] | None:
    """(solution, microseconds) of the untuned-file ``line`` among TunableOp's results
    (``(op, params, solution, milliseconds)`` tuples). Params are compared up to their
    ``_ld_`` part, which some torch versions leave out."""
    op, params = line.split(",", 1)
    key = params.split("_ld_")[0]
    for row in results or ():
        if len(row) >= 4 and row[0] == op and str(row[1]).split("_ld_")[0] == key:
            return str(row[2]), float(row[3]) * 1e3
    return None


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run_gemm(args: argparse.Namespace) -> int:
    """Tune, then bundle (``args`` from add_gemm_arguments). Exit 0: a bundle was written
    (or no GPU, with --allow-cpu); 1: nothing was tuned; ProblemError: bad input."""
    out = Path(args.out)
    if getattr(args, "te", None) is not None:
        return run_te(args, out)
    if args.problems is None:
        raise ProblemError("tune gemm: no problems CSV\nhint: imagebuild tune gemm "
                           "tuning/problems.csv (from `tune shapes`), or --te CMD")
    # ProblemError naming the line, before any GPU work
    stats = read_csv(Path(args.problems))[: args.top or None]
    out.mkdir(parents=True, exist_ok=True)
    problems = read_problems(str(args.problems))[: args.top or None]
    facts = gpu_facts()
    if facts["gpu"] is not None:
        facts["tunableop_validators"] = tunableop_validators()
    rotating, rotating_why = (args.rotating_mb, "--rotating-mb") if args.rotating_mb \
        else rotating_mb(facts)
    bench = args.bench or default_bench()
    methods = ["find_exact"] if getattr(args, "find_exact", False) else \
        [args.method] if args.method != "auto" else (
            ["hipblaslt", "tunableop"] if facts.get("vendor") == "amd" else ["tunableop"])
    record: dict[str, Any] = {"facts": facts, "methods": {}, "problems": [],
                              "settings": {"iters": args.iters, "cold_iters": args.cold_iters,
                                           "rotating_mb": rotating,
                                           "rotating_why": rotating_why}}
    deadline = time.monotonic() + args.budget_s
    interrupted = False
    # SLURM ends a job at its time limit with SIGTERM (then SIGKILL after KillWait): treat it
    # like Ctrl-C, so that the problems tuned so far still become a bundle.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        for method in methods:
            if method == "find_exact":
                code = tune_find_exact(args, stats, out, record, deadline,
                                       Settings(args.cold_iters, args.iters, rotating,
                                                rotating_why))
                if code is not None:
                    return code
                continue
            reason = skip_reason(method, facts, bench)
            record["methods"][method] = {"skipped": reason} if reason else {"ran": True}
            save(out, record)
            if reason:
                print(f"{method}: skipped: {reason}", flush=True)
                continue
            if method == "hipblaslt":
                tune_hipblaslt(problems, out, str(bench), record, deadline, args.iters,
                               args.cold_iters, rotating)
            else:
                tune_tunableop(problems, out, record, deadline, args.iters, rotating)
            save(out, record)
    except KeyboardInterrupt:
        # Ctrl-C or a job's time limit (SIGTERM): what is tuned so far becomes the bundle.
        interrupted = True
        record["stopped"] = (f"interrupted after {len(record['problems'])} of "
                             f"{len(problems)} problems")
        save(out, record)
        print(f"\n{record['stopped']}; bundling what is done", file=sys.stderr, flush=True)
    if facts["gpu"] is None:
        print("nothing tuned: GPU-only (no GPU visible to torch)", flush=True)
        return 0 if args.allow_cpu else 1
    try:
        bundle = bundle_from_run(out, args.image_digest,
                                 args.recipe or image_recipe(),
                                 args.devices)
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"bundle: {out} ({', '.join(bundle.files)}; {len(bundle.problems)} problems; "
          f"recipe {bundle.recipe or '?'}, torch {bundle.torch_version}, {bundle.gpu_arch})",
          flush=True)
    if (nothing := only_defaults(out, bundle)) is not None:
        print(f"note: {nothing}", flush=True)
    return 130 if interrupted else 0


def run_te(args: argparse.Namespace, out: Path) -> int:
    """``--te CMD``: TE's own tuning into the bundle at ``out`` (started here from this
    GPU's facts when ``out`` has no tuning.json yet)."""
    import shlex

    from .te_online import DEFAULT_ALGO_COUNT, DEFAULT_RUN_COUNT, run_te_tuning

    if args.problems is not None:
        raise ProblemError("tune gemm: --te tunes what CMD runs; drop the problems CSV "
                           f"{args.problems}")
    new_bundle = None
    if not (out / "tuning.json").is_file():
        facts = gpu_facts()
        if facts["gpu"] is not None:
            validators = tunableop_validators()
            new_bundle = Bundle(image_digest=args.image_digest,
                                recipe=args.recipe or image_recipe(),
                                hipblaslt_git_version=hipblaslt_revision(validators),
                                torch_version=str(facts.get("torch")),
                                gpu_arch=str(facts.get("arch")),
                                cu_count=int(facts.get("cu_count") or 0))
        elif args.allow_cpu:
            print("te: skipped: GPU-only (no GPU visible to torch)", flush=True)
            return 0
    path, rows = run_te_tuning(shlex.split(args.te), out, new_bundle,
                               args.te_run_count or DEFAULT_RUN_COUNT,
                               args.te_algo_count or DEFAULT_ALGO_COUNT)
    print(f"te: {rows} tuned GEMMs -> {path} (bundle {out}; loaded with "
          "TE_HIPBLASLT_ALGO_LOAD)", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m ...gemm_tuner``: exit 2 with one line on bad input."""
    try:
        return run_gemm(build_parser().parse_args(argv))
    except ProblemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
