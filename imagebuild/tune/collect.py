"""Turn what the in-image tuner left in its output directory into a tuning bundle."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagebuild.validate.checks.tune_bench import read_override_file
from imagebuild.validate.checks.tune_gemm import OVERRIDE, RESULTS, TUNABLEOP

from .bundle import Bundle, BundleProblem, ordinal_name, write_bundle
from .problem import TuneError

TUNABLEOP_FILENAME = "tunableop_results.csv"


def bundle_from_run(out: Path, image_digest: str, recipe: str, devices: int = 8) -> Bundle:
    """Read ``gemm_tuning.json`` and the tuned files in ``out``; write ``tuning.json``.
    TunableOp's result is copied for device ordinals 0..devices-1 (each rank reads its own)."""
    try:
        record: dict[str, Any] = json.loads((out / RESULTS).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TuneError(f"{out / RESULTS}: cannot read the tuner's results: {exc}") from exc
    facts = record.get("facts", {})
    if not facts.get("gpu"):
        raise TuneError(f"{out}: the tuner ran without a GPU; there is nothing to bundle")
    files: dict[str, str] = {}
    git_version = None
    if (out / OVERRIDE).is_file():
        git_version, rows = read_override_file((out / OVERRIDE).read_text())
        if rows:
            files["hipblaslt_override"] = OVERRIDE
    if (out / TUNABLEOP).is_file():
        for device in range(1, devices):
            shutil.copyfile(out / TUNABLEOP, out / ordinal_name(TUNABLEOP_FILENAME, device))
        if TUNABLEOP != ordinal_name(TUNABLEOP_FILENAME, 0):
            shutil.copyfile(out / TUNABLEOP, out / ordinal_name(TUNABLEOP_FILENAME, 0))
        files["tunableop"] = TUNABLEOP_FILENAME
    if not files:
        raise TuneError(f"{out}: no tuned file (no {OVERRIDE} rows, no {TUNABLEOP})")
    problems = tuple(
        BundleProblem(int(p["m"]), int(p["n"]), int(p["k"]), int(p["batch_count"]),
                      p["transA"], p["transB"], p["a_type"],
                      _us(p, "before_gflops"), p.get("after_us"), p.get("solution_index"))
        for p in record.get("problems", []) if "m" in p)
    bundle = Bundle(image_digest=image_digest, recipe=recipe, hipblaslt_git_version=git_version,
                    torch_version=str(facts.get("torch")), gpu_arch=str(facts.get("arch")),
                    cu_count=int(facts.get("cu_count") or 0), files=files, problems=problems,
                    created=datetime.now(UTC).isoformat(timespec="seconds"))
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
