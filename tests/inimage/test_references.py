"""A system's references: figures judged against expected values with tolerances (ReFrame's
reference tuples), the generic floor where there is none, and the report saying which."""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagebuild.inimage.checks import gemm, train
from imagebuild.inimage.gpu_data import UsageError, effective_thresholds, load_gpu_data
from imagebuild.inimage.references import (
    judge_against_references,
    parse_references,
    relaxed_thresholds,
)
from imagebuild.inimage.result import FAILED, PASSED, SKIPPED
from tests.support.validate import REPO, assert_valid_report, check

DATA = load_gpu_data()
H100 = effective_thresholds(DATA, "H100")


def _refs(figures: dict[str, Any], model: str = "H100") -> Any:
    return parse_references({"system": "testsys", "gpus": {model: figures}}, "refs.json")


def _gemm(tflops: float) -> Any:
    rows = [{"shape": [8192, 4096, 4096], "trans_a": False, "trans_b": True, "count": 1,
             "source": "t", "seconds": 2 * 8192 * 4096 * 4096 / tflops / 1e12, "iters": 10,
             "tflops": tflops, "flops": 2 * 8192 * 4096 * 4096}]
    return rows


@pytest.mark.parametrize(("raw", "message"), [
    ({"gpus": {"H100": {}}}, "system: expected the system's name"),
    ({"system": "s", "gpus": {"H100": {"gemm.tflops": [500, -0.1, None]}}},
     "gpus.H100.gemm.tflops: expected [value, lower, upper, unit]"),
    ({"system": "s", "gpus": {"H100": {"gemm.tflops": [500, 0.1, None, "TFLOP/s"]}}},
     "gpus.H100.gemm.tflops: lower must be null or a fraction of the value <= 0"),
    ({"system": "s", "gpus": {"H100": {"gemmm.tflops": [500, -0.1, None, "TFLOP/s"]}}},
     "gpus.H100.gemmm.tflops: expected <check>.<figure>"),
    ({"system": "s", "gpus": {"H100": {"gemm.tflops": ["fast", -0.1, None, None]}}},
     "the value must be a number"),
    ({"system": "s", "gpu": {}}, "gpu: unknown key"),
])
def test_bad_references_name_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError, match="refs.json: ") as info:
        parse_references(raw, "refs.json")
    assert message in str(info.value)


def test_a_reference_bounds_are_fractions_of_its_value_like_reframe() -> None:
    ref = _refs({"gemm.tflops": [500.0, -0.1, 0.2, "TFLOP/s"]}).for_gpu("H100", False)[
        "gemm.tflops"]
    assert ref.bounds() == (pytest.approx(450.0), pytest.approx(600.0))
    assert ref.holds(450.0) and ref.holds(600.0) and not ref.holds(449.0)
    assert not ref.holds(601.0) and not ref.holds(math.nan)
    open_top = _refs({"gemm.tflops": [500.0, -0.1, None, None]}).for_gpu("H100", False)
    assert open_top["gemm.tflops"].holds(1e9)


def test_a_gpu_gets_the_any_gpu_references_and_its_own() -> None:
    refs = parse_references({"system": "s", "gpus": {
        "*": {"train.mfu": [0.3, -0.1, None, None], "gemm.tflops": [1.0, -0.5, None, None]},
        "H100": {"gemm.tflops": [600.0, -0.1, None, None]},
        "cpu": {"train.tokens_per_s_per_gpu": [100.0, -0.5, None, None]}}}, "r")
    h100 = refs.for_gpu("H100", cpu=False)
    assert h100["gemm.tflops"].value == 600.0 and "train.mfu" in h100
    assert "train.tokens_per_s_per_gpu" not in h100
    assert set(refs.for_gpu(None, cpu=True)) == {"train.mfu", "gemm.tflops",
                                                 "train.tokens_per_s_per_gpu"}


def test_a_reference_replaces_the_floor_it_covers_and_the_report_says_which() -> None:
    """GEMM at 48% of peak fails H100's 55% floor; this system's reference (500 TFLOP/s,
    10% below allowed) passes it. The worst-shape floor, with no reference, stays."""
    refs = _refs({"gemm.tflops": [500.0, -0.1, None, "TFLOP/s"]}).for_gpu("H100", False)
    floors = relaxed_thresholds("gemm", H100, refs)
    assert floors["gemm_min_fraction"] == 0.0
    assert floors["gemm_min_fraction_worst_shape"] == H100["gemm_min_fraction_worst_shape"]
    rows = _gemm(0.48 * 989)
    without = gemm.evaluate(rows, 989.0, H100, "H100")
    assert without.status == FAILED  # the old judgement: the generic floor
    result = judge_against_references(gemm.evaluate(rows, 989.0, floors, "H100"), refs, H100,
                                      "testsys", gpu=True)
    assert result.status == PASSED, result.reason
    assert "within the testsys reference for gemm.tflops" in result.reason
    judged = {e["figure"]: e for e in result.figures["judged_against"]}
    assert judged["gemm.tflops"]["against"] == "reference"
    assert judged["gemm.tflops"]["reference"] == [500.0, -0.1, None, "TFLOP/s"]
    assert judged["gemm.tflops"]["verdict"] == PASSED
    assert judged["gemm.worst_shape_fraction_of_peak"] == {
        "figure": "gemm.worst_shape_fraction_of_peak", "value": 0.48, "against": "floor",
        "threshold": "gemm_min_fraction_worst_shape",
        "floor": H100["gemm_min_fraction_worst_shape"], "verdict": PASSED}
    # its floor is replaced, and the report says so
    assert judged["gemm.fraction_of_peak"]["against"] == "nothing"
    assert judged["gemm.fraction_of_peak"]["why"] == ("its floor is replaced by the reference "
                                                      "on gemm.tflops")


def test_a_figure_below_its_reference_fails_though_it_clears_the_floor() -> None:
    refs = _refs({"gemm.tflops": [800.0, -0.05, None, "TFLOP/s"]}).for_gpu("H100", False)
    rows = _gemm(0.7 * 989)  # 70% of peak: well above the generic 55%
    measured = gemm.evaluate(rows, 989.0, relaxed_thresholds("gemm", H100, refs), "H100")
    result = judge_against_references(measured, refs, H100, "testsys", gpu=True)
    assert result.status == FAILED
    assert result.reason.startswith("gemm.tflops 692.3 TFLOP/s outside the testsys reference "
                                    "800 TFLOP/s (760...inf)")


def test_a_check_without_references_lists_its_floors() -> None:
    result = judge_against_references(gemm.evaluate(_gemm(0.3 * 989), 989.0, H100, "H100"),
                                      {}, H100, None, gpu=True)
    assert result.status == FAILED
    judged = {e["figure"]: e for e in result.figures["judged_against"]}
    assert judged["gemm.fraction_of_peak"]["against"] == "floor"
    assert judged["gemm.fraction_of_peak"]["verdict"] == FAILED


def test_a_gpu_missing_from_the_peak_table_is_judged_by_its_reference() -> None:
    refs = _refs({"gemm.tflops": [300.0, -0.1, None, "TFLOP/s"]}, model="*").for_gpu(None, False)
    unjudged = gemm.evaluate(_gemm(310.0), None, H100, "a new GPU")
    assert unjudged.status == SKIPPED
    result = judge_against_references(unjudged, refs, H100, "testsys", gpu=True)
    assert result.status == PASSED and "within the testsys reference" in result.reason


def test_a_proxy_mfu_is_judged_against_nothing_and_says_why() -> None:
    figures = {"layers": 10, "seq": 8192, "losses": [12.0, 11.0], "loss_first": 12.0,
               "loss_last": 11.0, "tokens_per_s_per_gpu": 900.0, "tflops_per_gpu": 50.0,
               "workload": "proxy", "proxy": {"reason": "too big"}}
    result = judge_against_references(train.evaluate(figures, [[12.0, 11.0]], 989.0, H100,
                                                     gpu=True), {}, H100, None, gpu=True)
    judged = {e["figure"]: e for e in result.figures["judged_against"]}
    entry = judged["train.mfu"]
    assert entry["against"] == "nothing" and "proxy" in entry["why"]
    # every key figure it measured has its entry, each saying why nothing judged it
    assert {"train.tokens_per_s_per_gpu", "train.tflops_per_gpu"} <= set(judged)
    assert all(e["against"] == "nothing" and "proxy" in e["why"] for e in judged.values())


def test_collectives_keep_their_floor_unless_every_op_it_judges_has_a_reference() -> None:
    one = _refs({"collectives.busbw_gbps_at_largest.all_reduce": [100.0, -0.1, None, "GB/s"]})
    assert relaxed_thresholds("collectives", H100, one.for_gpu("H100", False))[
        "collective_min_busbw_gbps"] == H100["collective_min_busbw_gbps"]
    every = _refs({f"collectives.busbw_gbps_at_largest.{op}": [100.0, -0.1, None, "GB/s"]
                   for op in ("all_reduce", "all_gather", "reduce_scatter")})
    assert relaxed_thresholds("collectives", H100, every.for_gpu("H100", False))[
        "collective_min_busbw_gbps"] == 0.0


def _run(tmp_path: Path, references: dict[str, Any], *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "refs.json").write_text(json.dumps(references))
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "imagebuild.inimage", "--checks", "collectives", "--nproc", "2",
         "--allow-cpu", "--references", "refs.json", "--report", "r.json", *extra],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_the_runner_judges_a_real_run_against_the_systems_references(tmp_path: Path) -> None:
    """Two gloo ranks on this machine: the all-reduce busbw is far below 1000 GB/s and far
    above 1e-6 GB/s, so one reference fails the check and the other passes it."""
    refs = {"system": "ci-node", "gpus": {"cpu": {
        "collectives.busbw_gbps_at_largest.all_reduce": [1000.0, -0.1, None, "GB/s"],
        "collectives.busbw_gbps_at_largest.all_gather": [1e-6, 0.0, None, "GB/s"]}}}
    proc = _run(tmp_path, refs)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid_report(report)
    assert report["references"]["system"] == "ci-node"
    assert report["references"]["source"] == {"path": "refs.json", "sha256": hashlib.sha256(
        (tmp_path / "refs.json").read_bytes()).hexdigest()}
    assert report["references"]["described_as"] is None
    result = check(report, "collectives")
    assert result["status"] == "failed"
    assert "collectives.busbw_gbps_at_largest.all_reduce" in result["reason"]
    assert "outside the ci-node reference 1000 GB/s (900...inf)" in result["reason"]
    judged = {e["figure"]: e for e in result["figures"]["judged_against"]}
    assert judged["collectives.busbw_gbps_at_largest.all_reduce"]["verdict"] == "failed"
    assert judged["collectives.busbw_gbps_at_largest.all_gather"]["verdict"] == "passed"
    # no reference and CPU mode: judged against nothing, and the report says so
    assert judged["collectives.busbw_gbps_at_largest.reduce_scatter"]["against"] == "nothing"


def test_a_bad_references_file_stops_the_run_naming_the_key(tmp_path: Path) -> None:
    proc = _run(tmp_path, {"system": "x", "gpus": {"cpu": {"train.mfu": [0.3, 0.1, None, None]}}})
    assert proc.returncode == 2
    assert "refs.json: gpus.cpu.train.mfu: lower must be null or a fraction" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def _per_rank_gemm(tflops: list[float]) -> Any:
    from imagebuild.inimage.across_ranks import summarize_ranks
    from imagebuild.inimage.result import merge_ranks

    results = [gemm.evaluate(_gemm(t), 989.0, H100, "H100") for t in tflops]
    return summarize_ranks(merge_ranks(results, [f"nid00{i}" for i in range(len(tflops))]))


def test_every_rank_is_judged_against_the_reference_not_rank_0_only() -> None:
    """Rank 0 is fast, rank 2 misses the reference: the check fails naming rank 2; the
    figures on top (rank 0's) would have passed it."""
    refs = _refs({"gemm.tflops": [700.0, -0.1, None, "TFLOP/s"]}).for_gpu("H100", False)
    merged = _per_rank_gemm([720.0, 705.0, 600.0, 710.0])
    assert merged.figures["tflops"] == 720.0  # rank 0's, on top
    assert merged.figures["across_ranks"]["tflops"]["worst"] == 600.0
    assert "worst 600 (rank 2, nid002), median 707.5" in merged.reason
    result = judge_against_references(merged, refs, H100, "testsys", gpu=True)
    assert result.status == FAILED
    assert result.reason.startswith("gemm.tflops 600 TFLOP/s on rank 2 (nid002) outside the "
                                    "testsys reference 700 TFLOP/s (630...inf)")
    judged = {e["figure"]: e for e in result.figures["judged_against"]}
    entry = judged["gemm.tflops"]
    assert (entry["value"], entry["rank"], entry["host"], entry["ranks"]) == \
        (600.0, 2, "nid002", 4)
    assert entry["median_of_ranks"] == 707.5 and entry["verdict"] == FAILED
    # the floor is judged on the worst rank too, and names it
    floor = judged["gemm.worst_shape_fraction_of_peak"]
    assert floor["against"] == "floor" and floor["rank"] == 2
    assert floor["value"] == pytest.approx(600.0 / 989.0, abs=1e-4)


def test_a_lower_is_better_figure_is_judged_on_its_highest_rank() -> None:
    from imagebuild.inimage.across_ranks import spread

    worst = spread([(0, "a", 2.1), (1, "b", 3.4), (2, "c", 2.2)], higher_is_better=False)
    assert (worst["worst"], worst["rank"], worst["host"]) == (3.4, 1, "b")
    assert worst["median"] == 2.2


def test_a_copy_made_by_the_host_names_the_original_file() -> None:
    copy = parse_references({"system": "s", "source": "measured by the site, 2026-05",
                             "file": {"path": "sites/beverin-refs.yaml", "sha256": "ab" * 32},
                             "gpus": {"*": {"gemm.tflops": [1.0, None, None, None]}}}, "x.json")
    assert copy.provenance() == {"path": "sites/beverin-refs.yaml", "sha256": "ab" * 32}
    assert copy.source == "measured by the site, 2026-05"
    with pytest.raises(UsageError, match=r"x.json: file: expected \{path, sha256\}"):
        parse_references({"system": "s", "file": "refs.yaml",
                          "gpus": {"*": {"gemm.tflops": [1.0, None, None, None]}}}, "x.json")
