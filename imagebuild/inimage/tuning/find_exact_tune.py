"""``imagebuild tune gemm --find-exact``: the problems as find_exact.py configs, find_exact.py
run on each where the image keeps it, and its winners turned into the record every route
writes (gemm_tuning.json) and hipBLASLt's override file, so the bundle is the same as the
bench route's."""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from .bench import override_file_text, override_row
from .find_exact import CONFIG_DIR, Config, Settings, find_exact_layout, write_configs
from .find_exact_run import missing, output_dir, read_results, run
from .gemm_bundle import OVERRIDE, save
from .gemm_facts import hipblaslt_revision
from .problems import ProblemError, ProblemStat


def tune_find_exact(args: argparse.Namespace, stats: list[ProblemStat], out: Path,
                    record: dict[str, Any], deadline: float, settings: Settings) -> int | None:
    """Write the configs and, unless --write-only, run find_exact.py on them. Returns an
    exit code when there is nothing more to do (--write-only), None to go on to the bundle;
    ProblemError when find_exact.py cannot run here, naming what is missing."""
    configs, refused = write_configs(stats, out / CONFIG_DIR, settings, str(args.problems))
    for problem_type, why, count in refused:
        print(f"find_exact: {count} problem(s) of type {problem_type.trans_a}"
              f"{problem_type.trans_b} {problem_type.a_type}: skipped: {why}", flush=True)
    for config in configs:
        print(f"find_exact: {config.path} ({len(config.sizes)} size(s), "
              f"RotatingBuffer {settings.rotating_mb} MiB: {settings.rotating_why})",
              flush=True)
    record["methods"]["find_exact"] = {"configs": [str(c.path) for c in configs],
                                       "skipped_types": [why for _, why, _ in refused]}
    save(out, record)
    layout = find_exact_layout(args.find_exact_script, args.hipblaslt_build_dir)
    if args.write_only:
        for config in configs:
            print(f"run: python3 {layout.script} {config.path} {layout.build_dir} "
                  f"{output_dir(out / CONFIG_DIR, config)}")
        return 0
    if not configs:
        raise ProblemError(f"{args.problems}: no problem find_exact.py can take")
    lacking = missing(layout, configs)
    if lacking:
        raise ProblemError("tune gemm --find-exact: find_exact.py cannot run here:\n"
                           + "\n".join(lacking) + "\nhint: an image built with hipBLASLt's "
                           "clients and tuning kit has them; else --find-exact-script and "
                           "--hipblaslt-build-dir, or --write-only to write the configs")
    record["methods"]["find_exact"].update(script=str(layout.script),
                                           build_dir=str(layout.build_dir),
                                           found_by=layout.origin)
    winners = []
    for config in configs:
        left = deadline - time.monotonic()
        if left <= 0:
            record["stopped"] = "time budget spent before " + config.path.name
            break
        try:
            ran = run(layout, config, out / CONFIG_DIR, left)
        except subprocess.TimeoutExpired:
            record["stopped"] = f"time budget spent in {config.path.name}"
            ran = None
        winners += _record_results(config, out, record, ran)
        save(out, record)
    _write_override(out, record, winners)
    save(out, record)
    return None


def _record_results(config: Config, out: Path, record: dict[str, Any],
                    ran: subprocess.CompletedProcess[str] | None) -> list[Any]:
    """Each size's result into the record (winner or the bench's last lines); the winners."""
    directory = output_dir(out / CONFIG_DIR, config)
    results = read_results(directory)
    runs = record["methods"]["find_exact"].setdefault("runs", [])
    runs.append({"config": config.path.name, "output": str(directory),
                 "exit_code": None if ran is None else ran.returncode,
                 "output_tail": [] if ran is None else
                 (ran.stdout or "").strip().splitlines()[-5:],
                 "logic_yaml": sorted(str(p) for p in (directory / "1_LogicYaml")
                                      .glob("*.yaml"))})
    winners = []
    for result in results:
        entry: dict[str, Any] = {
            "m": str(result.m), "n": str(result.n), "k": str(result.k),
            "batch_count": str(result.batch_count), "transA": result.transA,
            "transB": result.transB, "a_type": config.problem_type.a_type,
            "method": "find_exact", "result_file": str(result.file)}
        if result.winner is None:
            entry["error"] = list(result.tail)
            print(f"find_exact: m={result.m} n={result.n} k={result.k} "
                  f"{result.transA}{result.transB}: no winner: "
                  f"{result.tail[-1] if result.tail else 'empty output'}", flush=True)
        else:
            winners.append(result.winner)
            entry.update(after_gflops=result.winner.gflops, after_us=result.winner.us,
                         solution_index=result.winner.solution_index)
            print(f"find_exact: m={result.m} n={result.n} k={result.k} "
                  f"{result.transA}{result.transB}: solution {result.winner.solution_index}, "
                  f"{result.winner.gflops} GFLOP/s", flush=True)
        record["problems"].append(entry)
    return winners


def _write_override(out: Path, record: dict[str, Any], winners: list[Any]) -> None:
    """hipBLASLt's override file from the winners, as the bench writes it with
    HIPBLASLT_TUNING_FILE (bench.py): it needs the library's git revision (TunableOp's
    HIPBLASLT_VERSION validator) and the GPU's architecture and CU count."""
    facts = record["facts"]
    if not winners or not facts.get("gpu"):
        return
    revision = hipblaslt_revision(facts.get("tunableop_validators") or {})
    if revision is None:
        record["methods"]["find_exact"]["override"] = (
            "not written: this torch reports no hipBLASLt revision (TunableOp's "
            "HIPBLASLT_VERSION validator), and hipBLASLt ignores an override file whose "
            "Git Version differs")
        print(f"find_exact: {record['methods']['find_exact']['override']}", flush=True)
        return
    rows = [override_row(w, str(facts.get("arch")), int(facts.get("cu_count") or 0))
            for w in winners]
    path = out / OVERRIDE
    partial = path.with_name(path.name + ".partial")
    partial.write_text(override_file_text(revision, rows))
    os.replace(partial, path)
