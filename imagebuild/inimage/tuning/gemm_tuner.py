"""Offline GEMM tuning on this GPU, one problem at a time.

Reads a problems CSV (``imagebuild tune shapes``) and tunes each problem with
- PyTorch TunableOp (torch >= 2.6: ``torch.cuda.tunable.tune_gemm_in_file``; on NVIDIA the
  only solution is cuBLAS' default, so it exercises the plumbing only), writing
  ``tunableop_results0.csv``; and/or
- ``hipblaslt-bench`` with ``HIPBLASLT_TUNING_FILE`` (hipBLASLt >= 0.12, ROCm 6.4), which
  writes the override file itself: ``Git Version`` line, then one row per winner.
Timing settings: a rotating buffer larger than the GPU's last-level cache (512 MiB, as
hipBLASLt's tuning defaults), cold iterations before the timed ones. Results go to
``gemm_tuning.json`` after every problem, so Ctrl-C or a job's time limit keeps what is done.
When a GPU tuned anything, OUT_DIR becomes a tuning bundle: ``tuning.json`` (bundle_format.py)
records the recipe (from the image manifest), torch and hipBLASLt versions, GPU
architecture and CU count, and each problem's times.

    imagebuild tune gemm PROBLEMS.csv --out OUT_DIR [--method ...]   (host or image)
    python -m imagebuild.inimage.tuning.gemm_tuner PROBLEMS.csv --out OUT_DIR

``add_gemm_arguments`` is the one definition of these flags: the image's ``imagebuild tune
gemm`` and the host's (imagebuild/commands/tune.py) both build their parser with it.
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

from ..image_manifest import load_manifest, section
from ..options import DEFAULT_MANIFEST, MANIFEST_ENV
from .bench import (
    bench_argv,
    parse_results,
    parse_winner,
    read_override_file,
    tunableop_line,
)
from .bundle_format import (
    Bundle,
    BundleProblem,
    only_defaults,
    ordinal_name,
    write_bundle,
)
from .problems import ProblemError, read_csv

RESULTS = "gemm_tuning.json"
OVERRIDE = "hipblaslt_override.txt"
TUNABLEOP = "tunableop_results0.csv"
#: PYTORCH_TUNABLEOP_FILENAME of a bundle: each device ordinal reads its own copy.
TUNABLEOP_FILENAME = "tunableop_results.csv"
#: The columns that name a problem in gemm_tuning.json and tuning.json.
PROBLEM_KEYS = ("m", "n", "k", "batch_count", "transA", "transB", "a_type")


def read_problems(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def gpu_facts(index: int = 0) -> dict[str, Any]:
    """What a bundle is tied to about GPU ``index``: its architecture as the libraries name
    it (ROCm: the full gcnArchName, as TunableOp's GCN_ARCH_NAME validator; NVIDIA: sm_XY)
    and its compute-unit count (a column of every hipBLASLt override row)."""
    import torch

    if not torch.cuda.is_available():
        return {"gpu": None}
    props = torch.cuda.get_device_properties(index)
    return {"gpu": props.name, "arch": getattr(props, "gcnArchName", None) or
            f"sm_{props.major}{props.minor}", "cu_count": props.multi_processor_count,
            "vendor": "amd" if torch.version.hip else "nvidia", "torch": torch.__version__,
            "hip": torch.version.hip, "cuda": torch.version.cuda}


def tunableop_validators() -> dict[str, str]:
    """TunableOp's validators in this process (PT_VERSION, HIPBLASLT_VERSION, ...); empty
    where this torch has no TunableOp (CPU builds)."""
    try:
        from torch.cuda import tunable

        # torch's annotation says tuple[str, str]; it returns (name, value) pairs.
        validators = cast("tuple[tuple[str, str], ...]", tunable.get_validators())
        return {str(key): str(value) for key, value in validators}
    except (AttributeError, RuntimeError, ValueError):
        return {}


def hipblaslt_revision(validators: dict[str, str]) -> str | None:
    """The hipBLASLt git revision in TunableOp's HIPBLASLT_VERSION validator
    (``<version>-<git revision>``, pytorch/pytorch aten/src/ATen/cuda/tunable/Tunable.cpp)."""
    value = validators.get("HIPBLASLT_VERSION", "")
    return (value.rsplit("-", 1)[1] or None) if "-" in value else None


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


def bundle_from_run(out: Path, image_digest: str = "", recipe: str = "",
                    devices: int = 8) -> Bundle:
    """Read ``gemm_tuning.json`` and the tuned files in ``out``; write ``tuning.json``.

    TunableOp's result is copied for device ordinals 0..devices-1 (each rank reads its
    own). A problem tuned by both methods is one entry: hipBLASLt's solution index and
    times, else TunableOp's time. Raises ProblemError when there is nothing to bundle.
    """
    try:
        record: dict[str, Any] = json.loads((out / RESULTS).read_text())
    except (OSError, ValueError) as exc:
        raise ProblemError(f"{out / RESULTS}: cannot read the tuner's results: {exc}") from exc
    facts = record.get("facts", {})
    if not facts.get("gpu"):
        raise ProblemError(f"{out}: the tuner ran without a GPU; there is nothing to bundle")
    files: dict[str, str] = {}
    git_version = None
    if (out / OVERRIDE).is_file():
        git_version, rows = read_override_file((out / OVERRIDE).read_text())
        if rows:
            files["hipblaslt_override"] = OVERRIDE
    if (out / TUNABLEOP).is_file():
        for device in range(devices):
            copy = out / ordinal_name(TUNABLEOP_FILENAME, device)
            if copy.name != TUNABLEOP:
                shutil.copyfile(out / TUNABLEOP, copy)
        files["tunableop"] = TUNABLEOP_FILENAME
    if not files:
        raise ProblemError(f"{out}: no tuned file (no {OVERRIDE} rows, no {TUNABLEOP})")
    merged: dict[tuple[str, ...], dict[str, Any]] = {}
    for entry in record.get("problems", []):
        if all(key in entry for key in PROBLEM_KEYS):
            key = tuple(str(entry[k]) for k in PROBLEM_KEYS)
            merged[key] = {**entry, **merged.get(key, {})}  # the first method's figures win
    problems = tuple(
        BundleProblem(int(p["m"]), int(p["n"]), int(p["k"]), int(p["batch_count"]),
                      p["transA"], p["transB"], p["a_type"], _us(p, "before_gflops"),
                      p.get("after_us"), p.get("solution_index"))
        for p in merged.values())
    validators = facts.get("tunableop_validators") or {}
    bundle = Bundle(image_digest=image_digest, recipe=recipe,
                    hipblaslt_git_version=git_version or hipblaslt_revision(validators),
                    torch_version=str(facts.get("torch")), gpu_arch=str(facts.get("arch")),
                    cu_count=int(facts.get("cu_count") or 0), files=files, problems=problems,
                    # datetime.UTC needs Python 3.11; images may have 3.10
                    created=_dt.datetime.now(_dt.timezone.utc).isoformat(  # noqa: UP017
                        timespec="seconds"))
    write_bundle(out, bundle)
    return bundle


def _us(problem: dict[str, Any], key: str) -> float | None:
    """Time in microseconds from a GFLOP/s figure of this problem."""
    gflops = problem.get(key)
    if not gflops:
        return None
    flops = 2 * int(problem["m"]) * int(problem["n"]) * int(problem["k"]) \
        * int(problem["batch_count"])
    return flops / (float(gflops) * 1e3)


def image_recipe() -> str:
    """The recipe the image was built from (its manifest), "" outside an image."""
    manifest, _ = load_manifest(os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST)
    return str((manifest or {}).get("recipe") or "")


def default_bench() -> str | None:
    """hipblaslt-bench: the manifest's (an image built with hipBLASLt clients), then PATH,
    then $ROCM_PATH/bin."""
    manifest, _ = load_manifest(os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST)
    bench = section(manifest, "hipblaslt").get("bench")
    if bench and os.access(str(bench), os.X_OK):
        return str(bench)
    return shutil.which("hipblaslt-bench") or shutil.which(
        "hipblaslt-bench", path=os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "bin"))


DEFAULT_BUNDLE = "tuning/bundle"


def add_gemm_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``imagebuild tune gemm``, the same in an image and on the host."""
    parser.add_argument("problems", type=Path, nargs="?",
                        help="problems CSV from `imagebuild tune shapes` (not with --te)")
    parser.add_argument("--out", type=Path, default=Path(DEFAULT_BUNDLE),
                        help=f"bundle directory (default {DEFAULT_BUNDLE})")
    parser.add_argument("--method", choices=("auto", "tunableop", "hipblaslt"), default="auto",
                        help="auto: hipblaslt then tunableop on AMD, tunableop elsewhere")
    parser.add_argument("--bench", default=None,
                        help="hipblaslt-bench path (default: the image's, or on PATH)")
    parser.add_argument("--budget-s", type=float, default=3600.0,
                        help="time budget in seconds (default 3600)")
    parser.add_argument("--iters", type=int, default=100, help="timed iterations (default 100)")
    parser.add_argument("--cold-iters", type=int, default=20,
                        help="untimed iterations first (default 20)")
    parser.add_argument("--rotating-mb", type=int, default=512,
                        help="rotating buffer, larger than the GPU's cache (default 512)")
    parser.add_argument("--top", type=int, default=0,
                        help="tune only the first N problems of the CSV, which `tune shapes` "
                             "sorts most time first (default 0: all)")
    parser.add_argument("--image-digest", default=os.environ.get("IMAGEBUILD_IMAGE_DIGEST", ""),
                        help="image digest to record (default $IMAGEBUILD_IMAGE_DIGEST)")
    parser.add_argument("--recipe", default=os.environ.get("IMAGEBUILD_RECIPE"),
                        help="recipe to record (default $IMAGEBUILD_RECIPE, else the image "
                             "manifest's)")
    parser.add_argument("--devices", type=int, default=8,
                        help="device ordinals to copy TunableOp's results for (default 8)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="exit 0 when there is no GPU to tune on")
    parser.add_argument("--te", metavar="CMD", default=None,
                        help="instead of a problems CSV: run CMD (one quoted command line, "
                             "one process) with TransformerEngine's online GEMM tuning and "
                             "keep the file TE saves in the bundle (TE_HIPBLASLT_ALGO_LOAD)")
    parser.add_argument("--te-run-count", type=int, default=None,
                        help="TE_HIPBLASLT_TUNING_RUN_COUNT for --te (default 20)")
    parser.add_argument("--te-algo-count", type=int, default=None,
                        help="TE_HIPBLASLT_TUNING_ALGO_COUNT for --te (default 400)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="imagebuild tune gemm",
                                     description=__doc__.splitlines()[0])
    add_gemm_arguments(parser)
    return parser


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
    read_csv(Path(args.problems))  # ProblemError naming the line, before any GPU work
    out.mkdir(parents=True, exist_ok=True)
    problems = read_problems(str(args.problems))[: args.top or None]
    facts = gpu_facts()
    if facts["gpu"] is not None:
        facts["tunableop_validators"] = tunableop_validators()
    bench = args.bench or default_bench()
    methods = [args.method] if args.method != "auto" else (
        ["hipblaslt", "tunableop"] if facts.get("vendor") == "amd" else ["tunableop"])
    record: dict[str, Any] = {"facts": facts, "methods": {}, "problems": [],
                              "settings": {"iters": args.iters, "cold_iters": args.cold_iters,
                                           "rotating_mb": args.rotating_mb}}
    deadline = time.monotonic() + args.budget_s
    interrupted = False
    # SLURM ends a job at its time limit with SIGTERM (then SIGKILL after KillWait): treat it
    # like Ctrl-C, so that the problems tuned so far still become a bundle.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
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
                tune_tunableop(problems, out, record, deadline, args.iters,
                               args.rotating_mb)
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
