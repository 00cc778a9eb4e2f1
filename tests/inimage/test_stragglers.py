"""Stragglers: a rank whose own figure is more than a margin below its peers' median is
named (host, GPU, figure, how much slower) and fails the check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.inimage.result import FAILED, PASSED, merge_ranks, passed, skipped
from imagebuild.inimage.stragglers import find_stragglers, judge_stragglers
from imagebuild.inimage.test_hooks import SLOW_RANK_ENV
from tests.support.validate import REPO, assert_valid_report, check

RANKS = [{"rank": i, "host": f"nid00{i // 4}", "index": i % 4, "name": "AMD Instinct MI300A",
          "pci_bus_id": f"0000:{i % 4 + 1:02x}:00.0", "device": f"cuda:{i % 4}"}
         for i in range(8)]


def _gemm(tflops: list[float]) -> object:
    results = [passed("gemm", f"{t} TFLOP/s", {"tflops": t}) for t in tflops]
    return merge_ranks(results, [r["host"] for r in RANKS[:len(tflops)]])


def test_a_rank_more_than_the_margin_below_its_peers_is_named_and_fails() -> None:
    result = judge_stragglers(_gemm([500, 505, 498, 502, 500, 425, 501, 499]), RANKS, 0.10)
    assert result.status == FAILED
    (slow,) = result.figures["stragglers"]
    assert (slow["rank"], slow["host"], slow["gpu"]) == (5, "nid001", "GPU 1 0000:02:00.0")
    assert slow["peers_median"] == 500 and slow["slower_by"] == 0.15
    assert result.reason == ("straggler rank 5 (nid001, GPU 1 0000:02:00.0): gemm.tflops 425 "
                             "is 15% below its peers' median 500 (margin 10%)")


def test_within_the_margin_no_rank_is_named() -> None:
    result = judge_stragglers(_gemm([500, 505, 498, 502, 500, 460, 501, 499]), RANKS, 0.10)
    assert result.status == PASSED
    assert result.figures["stragglers"] == [] and result.figures["straggler_margin"] == 0.10


def test_ranks_without_the_figure_are_left_out() -> None:
    """hipblaslt runs on local rank 0 of each node only: the others skip it."""
    results = [passed("hipblaslt", "ran", {"tflops": 600.0}) if r["index"] == 0
               else skipped("hipblaslt", "not_applicable", "local rank 0 runs it")
               for r in RANKS]
    merged = merge_ranks(results, [r["host"] for r in RANKS])
    assert find_stragglers(merged.figures["per_rank"], "tflops", 0.1, RANKS) == []
    one = judge_stragglers(_gemm([500.0]), RANKS, 0.1)
    assert "stragglers" not in one.figures  # one rank: no peers


def _run(tmp_path: Path, *extra: str, slow: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    if slow:
        env[SLOW_RANK_ENV] = slow
    return subprocess.run(
        [sys.executable, "-m", "imagebuild.inimage", "--checks", "gemm", "--cpu-gemm",
         "--nproc", "2", "--allow-cpu", "--report", "r.json", *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_rank_made_slow_on_purpose_is_named_on_cpu(tmp_path: Path) -> None:
    """Two real ranks on this machine; rank 1 sleeps 10 ms after every timed GEMM call
    (the test hook), which makes it several times slower than rank 0."""
    proc = _run(tmp_path, slow="1:0.01")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid_report(report)
    gemm = check(report, "gemm")
    assert gemm["status"] == "failed"
    (slow,) = gemm["figures"]["stragglers"]
    assert slow["rank"] == 1 and slow["figure"] == "tflops" and slow["slower_by"] > 0.5
    assert slow["host"] == report["ranks"][1]["host"]
    assert f"straggler rank 1 ({slow['host']}, cpu): gemm.tflops" in gemm["reason"]
    assert "margin 50%" in gemm["reason"]  # CPU mode's default margin
    # the report shows the hook was on
    assert SLOW_RANK_ENV in gemm["figures"]["per_rank"][1]["test_hook"]
    assert "test_hook" not in gemm["figures"]["per_rank"][0]


def test_without_a_slow_rank_the_cpu_gemm_passes(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--straggler-margin", "0.9")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid_report(report)
    gemm = check(report, "gemm")
    assert gemm["status"] == "passed" and gemm["figures"]["stragglers"] == []
    assert all(r["tflops"] > 0 for r in gemm["figures"]["per_rank"])
    # what the figure was judged against, on the rank that gave its worst value
    judged, taf = gemm["figures"]["judged_against"]
    assert taf["figure"] == "gemm.taf_tflops" and taf["against"] == "nothing"
    assert judged["figure"] == "gemm.tflops" and judged["against"] == "nothing"
    assert judged["why"] == "CPU mode: no peak, no floor, no reference for this figure"
    assert judged["value"] == min(r["tflops"] for r in gemm["figures"]["per_rank"])
    assert judged["ranks"] == 2 and judged["rank"] in (0, 1)


@pytest.mark.parametrize("margin", ["0", "1.5"])
def test_a_margin_outside_0_to_1_is_a_usage_error(tmp_path: Path, margin: str) -> None:
    proc = _run(tmp_path, "--straggler-margin", margin)
    assert proc.returncode == 2
    assert f"--straggler-margin {float(margin)}: expected a fraction between 0 and 1" \
        in proc.stderr


def test_a_rank_slow_in_one_attention_pass_only_is_named() -> None:
    """Rank 3's backward pass is 25 % slower; the fwd+bwd sum hides it (6 %), the backward
    pass's own figure does not."""
    def rank(bwd: float, both: float) -> object:
        return passed("attention", "ok", {"fwd_tflops": 400.0, "bwd_tflops": bwd,
                                          "fwd_bwd_tflops": both})

    results = [rank(500.0, 470.0)] * 3 + [rank(375.0, 442.0)]
    merged = merge_ranks(results, [r["host"] for r in RANKS[:4]])
    result = judge_stragglers(merged, RANKS, 0.10)
    assert result.status == FAILED
    (slow,) = result.figures["stragglers"]
    assert (slow["rank"], slow["figure"], slow["slower_by"]) == (3, "bwd_tflops", 0.25)


def test_a_rank_slow_on_its_worst_gemm_shape_only_is_named() -> None:
    results = [passed("gemm", "ok", {"tflops": 600.0, "worst_shape_tflops": w})
               for w in (420.0, 425.0, 300.0, 418.0)]
    merged = merge_ranks(results, [r["host"] for r in RANKS[:4]])
    (slow,) = judge_stragglers(merged, RANKS, 0.10).figures["stragglers"]
    assert (slow["rank"], slow["figure"]) == (2, "worst_shape_tflops")
