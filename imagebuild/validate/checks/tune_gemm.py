"""tune_gemm: offline GEMM tuning on this GPU, one problem at a time.

Reads a problems CSV (``imagebuild tune shapes``) and tunes each problem with
- PyTorch TunableOp (torch >= 2.6: ``torch.cuda.tunable.tune_gemm_in_file``; on NVIDIA the
  only solution is cuBLAS' default, so it exercises the plumbing only), writing
  ``tunableop_results0.csv``; and/or
- ``hipblaslt-bench`` with ``HIPBLASLT_TUNING_FILE`` (hipBLASLt >= 0.12, ROCm 6.4), which
  writes the override file itself: ``Git Version`` line, then one row per winner.
Timing settings: a rotating buffer larger than the GPU's last-level cache (512 MiB, as
hipBLASLt's tuning defaults), cold iterations before the timed ones. Results go to
``gemm_tuning.json`` after every problem, so Ctrl-C or a job's time limit keeps what is done.

    python -m imagebuild.validate.checks.tune_gemm PROBLEMS.csv OUT_DIR [--method ...]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .tune_bench import bench_argv, parse_results, parse_winner, tunableop_line

RESULTS = "gemm_tuning.json"
OVERRIDE = "hipblaslt_override.txt"
TUNABLEOP = "tunableop_results0.csv"


def read_problems(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def gpu_facts() -> dict[str, Any]:
    import torch

    if not torch.cuda.is_available():
        return {"gpu": None}
    props = torch.cuda.get_device_properties(0)
    return {"gpu": props.name, "arch": getattr(props, "gcnArchName", None) or
            f"sm_{props.major}{props.minor}", "cu_count": props.multi_processor_count,
            "vendor": "amd" if torch.version.hip else "nvidia", "torch": torch.__version__,
            "hip": torch.version.hip, "cuda": torch.version.cuda}


def skip_reason(method: str, facts: dict[str, Any], bench: str | None) -> str | None:
    import torch

    if facts["gpu"] is None:
        return "GPU-only: no GPU visible to torch"
    if method == "tunableop":
        version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
        if version < (2, 6):
            return f"TunableOp offline tuning needs torch >= 2.6, this is {torch.__version__}"
    if method == "hipblaslt":
        if facts["vendor"] != "amd":
            return "hipBLASLt is ROCm-only; this GPU is not AMD"
        if not bench:
            return "no hipblaslt-bench (build the image with hipblaslt.clients, or pass --bench)"
    return None


def save(out: Path, record: dict[str, Any]) -> None:
    tmp = out / (RESULTS + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, out / RESULTS)


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
        tunable.write_file()
        record["problems"].append({"tunableop": line, "tuning_s": round(time.monotonic()
                                                                        - began, 2)})
        save(out, record)
        print(f"[{i}/{len(problems)}] {line} tuned", flush=True)
    (out / "untuned_one.csv").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems")
    parser.add_argument("out")
    parser.add_argument("--method", choices=("auto", "tunableop", "hipblaslt"), default="auto")
    parser.add_argument("--bench", default=None, help="hipblaslt-bench path")
    parser.add_argument("--budget-s", type=float, default=3600.0)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--cold-iters", type=int, default=20)
    parser.add_argument("--rotating-mb", type=int, default=512)
    parser.add_argument("--top", type=int, default=0, help="tune only the first N problems")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    problems = read_problems(args.problems)[: args.top or None]
    facts = gpu_facts()
    bench = args.bench or shutil.which("hipblaslt-bench") or shutil.which(
        "hipblaslt-bench", path=os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "bin"))
    methods = [args.method] if args.method != "auto" else (
        ["hipblaslt", "tunableop"] if facts.get("vendor") == "amd" else ["tunableop"])
    record: dict[str, Any] = {"facts": facts, "methods": {}, "problems": [],
                              "settings": {"iters": args.iters, "cold_iters": args.cold_iters,
                                           "rotating_mb": args.rotating_mb}}
    deadline = time.monotonic() + args.budget_s
    for method in methods:
        reason = skip_reason(method, facts, bench)
        record["methods"][method] = {"skipped": reason} if reason else {"ran": True}
        save(out, record)
        if reason:
            print(f"{method}: skipped: {reason}", flush=True)
            continue
        if method == "hipblaslt":
            tune_hipblaslt(problems, out, str(bench), record, deadline, args.iters,
                           args.cold_iters, args.rotating_mb)
        else:
            tune_tunableop(problems, out, record, deadline, args.iters, args.rotating_mb)
        save(out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
