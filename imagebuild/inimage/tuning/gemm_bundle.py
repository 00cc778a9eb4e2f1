"""A GEMM tuning run's record (gemm_tuning.json, saved after every problem) and the tuning
bundle made from it: the tuned files plus tuning.json (bundle_format.py). Every route (the
bench, TunableOp, find_exact.py) writes the same record and so the same bundle.

Standard library only.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
from pathlib import Path
from typing import Any

from .bench import read_override_file
from .bundle_format import Bundle, BundleProblem, ordinal_name, write_bundle
from .gemm_facts import hipblaslt_revision
from .problems import ProblemError

RESULTS = "gemm_tuning.json"
OVERRIDE = "hipblaslt_override.txt"
TUNABLEOP = "tunableop_results0.csv"
#: PYTORCH_TUNABLEOP_FILENAME of a bundle: each device ordinal reads its own copy.
TUNABLEOP_FILENAME = "tunableop_results.csv"
#: The columns that name a problem in gemm_tuning.json and tuning.json.
PROBLEM_KEYS = ("m", "n", "k", "batch_count", "transA", "transB", "a_type")


def save(out: Path, record: dict[str, Any]) -> None:
    """Write the record (atomically: Ctrl-C never leaves half a file)."""
    tmp = out / (RESULTS + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(tmp, out / RESULTS)


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
