"""Helpers for tests that run the validation suite (tests/validate, and the end-to-end
image test): run the CLI, load and check a report."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

REPO = Path(__file__).resolve().parents[2]


def report_schema() -> dict[str, Any]:
    return json.loads(resources.files("imagebuild").joinpath(
        "data/validate-report.schema.json").read_text())


def assert_valid_report(report: dict[str, Any]) -> None:
    """The report matches docs/validate-report.md's schema (every problem listed)."""
    validator = jsonschema.Draft202012Validator(report_schema())
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in validator.iter_errors(report)]
    assert not errors, "report does not match the schema:\n" + "\n".join(errors)


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    matches = [c for c in report["checks"] if c["name"] == name]
    assert len(matches) == 1, f"check {name} appears {len(matches)} times"
    return matches[0]


def assert_cpu_mode_report(report: dict[str, Any], world_size: int = 2) -> None:
    """What a CPU-mode run must show: real collectives and a real training step over
    ``world_size`` ranks, every GPU-only check skipped with its reason."""
    assert_valid_report(report)
    assert report["mode"] == "cpu" and report["backend"] == "gloo"
    assert report["world_size"] == world_size
    for name in ("devices", "gemm", "hipblaslt", "attention", "network"):
        result = check(report, name)
        assert result["status"] == "skipped", (name, result)
        assert result["cause"] == "no_gpu", (name, result)
        assert result["reason"].strip(), name
    collectives = check(report, "collectives")
    assert collectives["status"] == "passed", collectives["reason"]
    assert collectives["figures"]["world_size"] == world_size
    rows = collectives["figures"]["results"]
    assert {r["op"] for r in rows} == {"all_reduce", "all_gather", "reduce_scatter"}
    assert all(r["busbw_gbps"] > 0 and r["seconds"] > 0 for r in rows)
    train = check(report, "train")
    assert train["status"] == "passed", train["reason"]
    figures = train["figures"]
    assert figures["world_size"] == world_size
    assert all(math.isfinite(x) for x in figures["losses"])
    assert figures["loss_last"] < figures["loss_first"]
    assert figures["tokens_per_s_per_gpu"] > 0
    assert figures["layers"] >= 1 and figures["flops_per_token"] > 0


def run_imagebuild(*args: str, cwd: Path, env: dict[str, str] | None = None,
                   timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``imagebuild ARGS`` in a subprocess (the real CLI), output captured."""
    full_env = dict(os.environ)
    full_env.pop("IMAGEBUILD_MANIFEST", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "imagebuild", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)
