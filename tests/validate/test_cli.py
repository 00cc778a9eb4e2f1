"""`imagebuild validate` and `imagebuild report` end to end on CPU, through the real CLI."""

from __future__ import annotations

import copy
import json
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.support.validate import (
    assert_cpu_mode_report,
    assert_valid_report,
    check,
    run_imagebuild,
)

CpuSuite = tuple[subprocess.CompletedProcess[str], dict[str, Any], Path]


def test_cpu_suite_runs_for_real_and_passes_with_allow_cpu(cpu_suite: CpuSuite) -> None:
    proc, report, _ = cpu_suite
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_cpu_mode_report(report, world_size=2)
    assert report["runtime"] == "local" and report["launcher"] == "spawn"
    environment = check(report, "environment")
    assert environment["status"] == "skipped" and environment["cause"] == "not_applicable"
    assert "no manifest" in environment["reason"]
    assert report["summary"]["skipped_no_gpu"] == ["devices", "gemm", "hipblaslt", "attention",
                                                   "network"]
    assert "validation passed" in proc.stdout and "train" in proc.stdout
    train = check(report, "train")["figures"]
    assert train["model"]["kv_heads"] < train["model"]["heads"]  # GQA kept in CPU mode
    assert train["parallelism"] == "FSDP2 over 2 rank(s)"


def test_gpu_checks_skipped_without_allow_cpu_fail_the_run(tmp_path: Path) -> None:
    proc = run_imagebuild("validate", "--local", "--checks", "environment,gemm",
                          "--report", "r.json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid_report(report)
    assert report["summary"]["exit_code"] == 1
    assert report["summary"]["skipped_no_gpu"] == ["gemm"]
    assert "--allow-cpu" in proc.stdout


def test_thresholds_are_read_and_a_cpu_proxy_is_not_held_to_them(tmp_path: Path) -> None:
    """A real (one-rank) train step with a YAML override raising the MFU floor: the CPU
    step is a declared proxy, so the full model's threshold is recorded but not applied;
    the report and the terminal say so. (The threshold failing the full model is
    test_gpu_paths_on_cpu.test_train_gpu_branch.)"""
    (tmp_path / "t.yaml").write_text("train_min_mfu: 0.5\n")
    proc = run_imagebuild("validate", "--local", "--allow-cpu", "--checks", "train",
                          "--nproc", "1", "--train-steps", "2", "--peak-tflops", "1000",
                          "--thresholds", "t.yaml", "--report", "r.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid_report(report)
    train = check(report, "train")
    assert train["status"] == "passed" and train["figures"]["workload"] == "proxy"
    assert "PROXY" in train["reason"] and "threshold is not applied" in train["reason"]
    assert train["figures"]["mfu"] < 0.5 and train["figures"]["world_size"] == 1
    assert report["thresholds"]["train_min_mfu"] == 0.5
    assert "ran a PROXY" in proc.stdout


def test_environment_mismatch_against_a_manifest(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"recipe": "r", "input_hash": "sha256:ab",
                                    "rocm_version": None, "python_version": "3.9",
                                    "wheels": {"torch": "2.8.0+rocm7.0.2.lw.git245bf6ed"},
                                    "gpu_targets": ["gfx942"]}))
    proc = run_imagebuild("validate", "--checks", "environment", "--manifest", str(manifest),
                          "--report", "r.json", cwd=tmp_path)
    assert proc.returncode == 1
    report = json.loads((tmp_path / "r.json").read_text())
    environment = check(report, "environment")
    assert environment["status"] == "failed"
    assert "manifest 3.9" in environment["reason"]
    assert "manifest 2.8.0+rocm7.0.2.lw.git245bf6ed" in environment["reason"]
    assert report["recipe"] == "r" and report["input_hash"] == "sha256:ab"


def test_bad_thresholds_file_is_an_error_not_a_result(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("MI300X:\n  gemm_min_fracton: 0.5\n")
    proc = run_imagebuild("validate", "--local", "--thresholds", "t.yaml", cwd=tmp_path)
    assert proc.returncode == 2
    assert "MI300X.gemm_min_fracton: unknown threshold (did you mean 'gemm_min_fraction'?)" \
        in proc.stderr


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_report_compares_side_by_side_and_plots(cpu_suite: CpuSuite, tmp_path: Path) -> None:
    _, report, _ = cpu_suite
    faster = copy.deepcopy(report)
    faster["image"] = "imagebuild/faster:latest"
    train = check(faster, "train")["figures"]
    train["tokens_per_s_per_gpu"] *= 2
    train["tflops_per_gpu"] *= 2
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report))
    b.write_text(json.dumps(faster))
    png = tmp_path / "out" / "compare.png"
    proc = run_imagebuild("report", str(a), str(b), "--plot", str(png), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "train tokens/s/GPU" in line)
    assert "2.00x" in row
    assert "imagebuild/faster:latest" in proc.stdout
    width, height = _png_size(png)
    assert width > 300 and height > 200
    with Image.open(png) as image:
        image.verify()


def test_report_rejects_a_file_that_is_not_a_report(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "something else"}))
    proc = run_imagebuild("report", str(bad), "--no-plot", cwd=tmp_path)
    assert proc.returncode == 2 and "not a validation report" in proc.stderr


@pytest.mark.parametrize("flag", ["--checks", "--skip"])
def test_unknown_check_names_are_usage_errors(tmp_path: Path, flag: str) -> None:
    proc = run_imagebuild("validate", flag, "gemm,flash", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown check flash" in proc.stderr
