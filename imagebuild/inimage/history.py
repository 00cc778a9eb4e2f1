"""A system's validation history: one JSON line per run, appended after every run.

Each line holds the run's key figures (for a figure every rank measures, the worst rank's,
with its rank and the median of the ranks under ``across_ranks``) with what they depend on: the system, the image's
identity (reference, recipe, input hash, torch/HIP/ROCm versions), the GPU, ranks and
nodes, and the train step's configuration, so ``imagebuild report --history FILE`` can
show a figure over time and compare each run only with earlier runs of the same setup.
Appending one line per run keeps concurrent writers (two jobs of one system) from
interleaving: each record is written with one ``write`` on a file opened for appending
(POSIX appends each such write at the end of the file).

Standard library only: the in-image runner appends (``--history FILE``, e.g. in a batch
job on a shared file system) as the host does after a containerised run.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HISTORY_SCHEMA = "imagebuild-validate-history/1"

#: The figures a history keeps: "<check>.<path>" into that check's figures.
HISTORY_FIGURES = (
    "gemm.tflops", "gemm.fraction_of_peak", "gemm.worst_shape_tflops", "gemm.taf_tflops",
    "hipblaslt.tflops",
    "attention.fwd_bwd_tflops", "attention.fwd_tflops", "attention.bwd_tflops",
    "collectives.busbw_gbps_at_largest.all_reduce",
    "collectives.busbw_gbps_at_largest.all_gather",
    "collectives.busbw_gbps_at_largest.reduce_scatter",
    "rccl_tests.all_reduce_busbw_gbps", "rccl_tests.all_gather_busbw_gbps",
    "rccl_tests.reduce_scatter_busbw_gbps",
    "train.tokens_per_s_per_gpu", "train.tflops_per_gpu", "train.mfu", "train.hfu",
    "megatron.tflops_per_gpu",
)


def _check_figures(report: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    """The figures of the report's check ``name``; None when it has no such check."""
    return next((c.get("figures") or {} for c in report.get("checks", [])
                 if c.get("name") == name), None)


def _across_ranks(report: Mapping[str, Any], dotted: str) -> Mapping[str, Any] | None:
    """The spread across ranks of a figure every rank measured (across_ranks.py)."""
    name, _, path = dotted.partition(".")
    figures = _check_figures(report, name) or {}
    spread = (figures.get("across_ranks") or {}).get(path)
    return spread if isinstance(spread, Mapping) else None


def _figure(report: Mapping[str, Any], dotted: str) -> Any:
    spread = _across_ranks(report, dotted)
    if spread is not None:  # the slowest rank's, which the job runs at; not rank 0's
        return spread.get("worst")
    name, _, path = dotted.partition(".")
    value: Any = _check_figures(report, name)
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fingerprint_digest(fingerprint: Any) -> str | None:
    """One sha256 over the libraries a run loaded (fingerprint.py: name and sha256 of each),
    so two runs that loaded the same bytes share it, wherever the files were mounted."""
    files = fingerprint.get("files") if isinstance(fingerprint, Mapping) else None
    if not files:
        return None
    pairs = sorted(f"{f.get('name')}:{f.get('sha256')}" for f in files
                   if isinstance(f, Mapping))
    return "sha256:" + hashlib.sha256("\n".join(pairs).encode()).hexdigest()


def history_record(report: Mapping[str, Any], system: str | None) -> dict[str, Any]:
    """One run's line: identity, setup and the numeric key figures it measured."""
    versions = report.get("versions") or {}
    train: Mapping[str, Any] = next(
        (c for c in report.get("checks", []) if c.get("name") == "train"), {})
    figures = {name: value for name in HISTORY_FIGURES
               if (value := _figure(report, name)) is not None}
    references = report.get("references") or {}
    return {
        "schema": HISTORY_SCHEMA,
        "created": report.get("created"),
        "system": (system or report.get("system") or references.get("system")
                   or report.get("host")),
        "image": report.get("image"), "recipe": report.get("recipe"),
        "input_hash": report.get("input_hash"),
        "fingerprint": fingerprint_digest(report.get("fingerprint")),
        "versions": {key: versions.get(key) for key in ("torch", "hip", "cuda", "rocm", "nccl")},
        "gpu_model": report.get("gpu_model"), "mode": report.get("mode"),
        "world_size": report.get("world_size"), "nodes": report.get("nodes"),
        "train_configuration": (train.get("figures") or {}).get("configuration"),
        "checks": {c.get("name"): c.get("status") for c in report.get("checks", [])},
        "exit_code": (report.get("summary") or {}).get("exit_code"),
        "figures": figures,
        # where every rank measured its own figure: the worst rank (in figures) and the median
        "across_ranks": {name: {key: spread.get(key) for key in
                                ("worst", "rank", "host", "median", "ranks")}
                         for name in figures if (spread := _across_ranks(report, name))},
    }


def append_history(path: str | os.PathLike[str], record: Mapping[str, Any]) -> Path:
    """Append ``record`` as one line (the directory is made if missing)."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    descriptor = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, line)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    return file


def read_history(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every record of a history file, oldest first; a bad line raises ValueError naming it."""
    file = Path(path)
    records = []
    for number, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{file}:{number}: not a JSON line ({exc})") from None
        if not isinstance(record, dict) or record.get("schema") != HISTORY_SCHEMA:
            raise ValueError(f"{file}:{number}: not an imagebuild validation history record "
                             f"(expected schema {HISTORY_SCHEMA})")
        records.append(record)
    return records
