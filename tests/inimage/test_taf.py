"""The TAF-style GEMM figure (AMD's Typical Attained FLOPs formula on this workload's
shapes): FLOP-weighted harmonic mean, each shape once, beside the best shape; in the gemm
check's report and in tune verify's table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from imagebuild.inimage.checks.gemm import evaluate, measure_problem
from imagebuild.inimage.model.workload import GemmProblem
from imagebuild.inimage.taf import summary, taf
from imagebuild.inimage.tuning import problems as tuning_problems
from imagebuild.inimage.tuning.verify import (
    Measurement,
    ProblemComparison,
    judge,
    table,
    taf_figures,
)

REPO = Path(__file__).resolve().parents[2]


def test_the_formula_is_total_flops_over_total_time() -> None:
    # 2 TFLOP at 100 TFLOP/s (0.02 s) and 1 TFLOP at 50 TFLOP/s (0.02 s): 3 TFLOP in 0.04 s.
    assert taf([(2e12, 100.0), (1e12, 50.0)]) == pytest.approx(75.0)
    # 3 TFLOP at 100 and 1 at 50: 4 TFLOP in 0.05 s = 80, not the mean of the rates (75).
    assert taf([(3e12, 100.0), (1e12, 50.0)]) == pytest.approx(80.0)
    assert taf([]) is None and taf([(1e12, 0.0)]) is None


def test_each_shape_counts_once_unlike_the_step_weighted_figure() -> None:
    rows = [{"shape": [8192, 4096, 4096], "trans_a": False, "trans_b": True, "count": 96,
             "flops": 2 * 8192 * 4096 * 4096, "seconds": 0.001, "tflops": 0.0},
            {"shape": [8192, 128256, 4096], "trans_a": False, "trans_b": True, "count": 1,
             "flops": 2 * 8192 * 128256 * 4096, "seconds": 0.03, "tflops": 0.0}]
    for row in rows:
        row["tflops"] = row["flops"] / row["seconds"] / 1e12
    figures = evaluate(rows, 1000.0, {"gemm_min_fraction": 0.0,
                                      "gemm_min_fraction_worst_shape": 0.0}, "test").figures
    once = (rows[0]["flops"] + rows[1]["flops"]) / (0.001 + 0.03) / 1e12
    weighted = (96 * rows[0]["flops"] + rows[1]["flops"]) / (96 * 0.001 + 0.03) / 1e12
    assert figures["taf_tflops"] == pytest.approx(once, rel=1e-4)
    assert figures["tflops"] == pytest.approx(weighted, abs=0.01)
    assert figures["best_shape"] == [8192, 128256, 4096]
    assert figures["taf_shapes"] == 2 and "TAF-style" in figures["taf_definition"]


def test_on_real_cpu_gemms_it_is_their_flops_over_their_time() -> None:
    problems = [GemmProblem(256, 512, 384, False, True, 1, "test"),
                GemmProblem(512, 256, 128, True, False, 1, "test")]
    rows = [measure_problem(p, torch.device("cpu"), target_s=0.01, llc_bytes=2**20,
                            dtype=torch.float32) for p in problems]
    result = summary(rows)
    expected = sum(r["flops"] for r in rows) / sum(r["seconds"] for r in rows) / 1e12
    assert result["taf_tflops"] == pytest.approx(expected, rel=1e-3, abs=1e-4)
    assert result["best_shape_tflops"] == pytest.approx(max(r["tflops"] for r in rows),
                                                        abs=1e-4)


def test_tune_verify_reports_it_before_and_after() -> None:
    fast = tuning_problems.GemmProblem(4096, 4096, 4096)
    slow = tuning_problems.GemmProblem(8192, 4096, 128)
    rows = [ProblemComparison(fast, Measurement(1000.0, "a"), Measurement(800.0, "b")),
            ProblemComparison(slow, Measurement(200.0, "a"), Measurement(200.0, "a"))]
    figures = taf_figures(rows)
    before = (fast.flops + slow.flops) / (1000.0 + 200.0) / 1e6
    after = (fast.flops + slow.flops) / (800.0 + 200.0) / 1e6
    assert figures["taf_tflops_before"] == pytest.approx(before, rel=1e-4)
    assert figures["taf_tflops_after"] == pytest.approx(after, rel=1e-4)
    assert figures["best_problem_after"]["problem"] == fast.label()
    lines = table(judge(rows))
    assert f"TAF-style over 2 problems: {before:.1f} -> {after:.1f} TFLOP/s" in lines[-2]


@pytest.mark.slow
def test_the_report_of_a_cpu_gemm_run_carries_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "imagebuild.inimage", "--cpu", "--allow-cpu",
                           "--cpu-gemm", "--nproc", "1", "--checks", "gemm", "--report",
                           str(tmp_path / "r.json")], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    gemm = json.loads((tmp_path / "r.json").read_text())["checks"][0]["figures"]
    assert gemm["taf_tflops"] > 0 and gemm["taf_shapes"] == len({
        (tuple(s["shape"]), s["trans_a"], s["trans_b"]) for s in gemm["shapes"]})
    assert gemm["best_shape_tflops"] == max(round(s["tflops"], 4) for s in gemm["shapes"])
