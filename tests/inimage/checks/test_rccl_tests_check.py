"""The rccl_tests check on CPU: the benchmarks are stand-ins (tests/support/rccl_tests_standin.py)
that print rccl-tests' output format, run as real processes; the GPU count is the one seam
(torch.cuda.device_count). Expected figures are computed here from the stand-in's model, not
read back from the check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from imagebuild.inimage.checks import rccl_tests
from imagebuild.inimage.job_rank import Launch
from imagebuild.inimage.options import parse, selected_checks
from imagebuild.inimage.references import Reference, judge_against_references
from imagebuild.inimage.result import CheckResult, failed, passed
from imagebuild.inimage.tuning.rccl_sweep import parse_rccl_tests_rows
from tests.support.rccl_tests_standin import write_standins
from tests.support.validate import REPO, assert_valid_report, check

GIB4 = 2**32


def standin_busbw(size: int, scale: float = 1.0) -> float:
    """What the stand-in prints for Ring/Simple at ``size`` (its model, rounded as printed)."""
    us = 30.0 + size / (160.0 * 1e3)
    return round(size / us / 1e3 * scale, 2)


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    return write_standins(tmp_path / "bin")


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    def set_count(count: int) -> None:
        monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    set_count(4)
    return set_count


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (*rccl_tests.CONFIG_ENV, rccl_tests.BIN_DIR_ENV, "STANDIN_LAST_ROW_SCALE",
                "STANDIN_WRONG"):
        monkeypatch.delenv(key, raising=False)


def calls(bench: Path) -> list[dict]:
    return [json.loads(line) for line in (bench / "calls.jsonl").read_text().splitlines()]


def test_busbw_at_the_largest_size_from_the_benchmarks_output(make_context, bench, gpus,
                                                              monkeypatch):
    # The largest size is made slower than the one below it: a check that took the best
    # bandwidth instead of the largest size's would report the 2 GiB figure.
    monkeypatch.setenv("STANDIN_LAST_ROW_SCALE", "0.5")
    monkeypatch.setenv("NCCL_PROTO", "Simple")
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    ctx = make_context("--rccl-tests-dir", str(bench), mode="gpu")
    result = rccl_tests.run(ctx)
    assert result.status == "passed", result.reason
    figures = result.figures
    expected = standin_busbw(GIB4, 0.5)
    assert expected < standin_busbw(GIB4 // 2)
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        assert figures[f"{op}_busbw_gbps"] == expected
        assert figures["results"][op]["largest_bytes"] == GIB4
        assert figures["results"][op]["sizes"] == [8 * 2**20, GIB4]
        assert figures["results"][op]["rows"] == 10
        assert figures["results"][op]["output_tail"][-1].split()[0] == str(GIB4)
    # busbw, not algbw: the stand-in's algbw is busbw / (2(n-1)/n) on 4 GPUs for all-reduce
    assert figures["results"]["all_reduce"]["algbw_gbps"] == pytest.approx(expected / 1.5,
                                                                            abs=0.01)
    assert figures["results"]["all_gather"]["algbw_gbps"] == pytest.approx(expected / 0.75,
                                                                            abs=0.01)
    assert figures["config"] == ("4 GPUs in one process (-g 4), 8,388,608..4,294,967,296 B by "
                                 "x2, -n 20 -w 5, NCCL_ALGO=Ring, NCCL_PROTO=Simple")
    assert figures["configuration"]["env"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert f"all_reduce {expected:.1f}" in result.reason
    ran = calls(bench)
    assert [c["binary"] for c in ran] == ["all_reduce_perf", "all_gather_perf",
                                          "reduce_scatter_perf"]
    for call in ran:
        args = dict(zip(call["args"][::2], call["args"][1::2]))
        assert args == {"-b": "8388608", "-e": str(GIB4), "-f": "2", "-g": "4", "-n": "20",
                        "-w": "5", "-c": "1"}


def test_sizes_reach_the_step_and_shrink_to_free_memory():
    low, high, why = rccl_tests.size_range(8, None)
    # FSDP2's root-group fp32 reduce-scatter for Llama-3.1-8B on 8 ranks: 4,202,708,992 B
    assert (low, high) == (8 * 2**20, GIB4) and "4,202,708,992 B on 8 ranks" in why
    low, high, why = rccl_tests.size_range(8, 4 * 2**30)
    assert high == 2**30 and "capped at 1,073,741,824 B" in why


def test_wrong_values_fail_the_check(make_context, bench, gpus, monkeypatch):
    monkeypatch.setenv("STANDIN_WRONG", "3")
    result = rccl_tests.run(make_context("--rccl-tests-dir", str(bench), mode="gpu"))
    assert result.status == "failed"
    assert f"all_reduce_perf: 3 wrong values (#wrong) at {GIB4} B" in result.reason


def test_a_failing_benchmark_is_named_with_its_output(make_context, bench, gpus, monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Tree")  # RCCL has no Tree for all-gather/reduce-scatter
    result = rccl_tests.run(make_context("--rccl-tests-dir", str(bench), mode="gpu"))
    assert result.status == "failed"
    assert ("all_gather_perf exited 3 with no result rows: NCCL WARN Error : no algorithm"
            in result.reason)
    assert "reduce_scatter_perf exited 3" in result.reason
    assert "all_reduce_busbw_gbps" in result.figures
    assert "all_gather_busbw_gbps" not in result.figures
    assert "NCCL_ALGO=Tree" in result.figures["config"]


def test_skips_say_why(make_context, bench, gpus, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = rccl_tests.run(make_context("--rccl-tests-dir", str(empty), mode="gpu"))
    assert (result.status, result.cause) == ("skipped", "not_applicable")
    assert f"all_reduce_perf, all_gather_perf, reduce_scatter_perf not in {empty}" in result.reason
    monkeypatch.setenv(rccl_tests.BIN_DIR_ENV, str(bench))  # the variable finds them
    result = rccl_tests.run(make_context(mode="cpu"))
    assert (result.status, result.cause) == ("skipped", "no_gpu")
    gpus(1)
    result = rccl_tests.run(make_context(mode="gpu"))
    assert (result.status, result.cause) == ("skipped", "not_applicable")
    assert "sees 1 GPU" in result.reason
    gpus(4)
    other = make_context(mode="gpu", launch=Launch(1, 2, 1, "127.0.0.1", 0, "torchrun"),
                         hosts=["nid1", "nid1"])
    result = rccl_tests.run(other)
    assert (result.status, result.cause) == ("skipped", "not_applicable")
    assert "local rank 0 of nid1" in result.reason
    assert not (bench / "calls.jsonl").exists()  # nothing ran for any of them


def test_not_in_the_default_checks():
    assert "rccl_tests" not in selected_checks(parse([]))
    assert "collectives" in selected_checks(parse([]))
    assert selected_checks(parse(["--checks", "rccl_tests,collectives"])) == [
        "collectives", "rccl_tests"]


def _measured(bench: Path) -> CheckResult:
    return rccl_tests.measure(bench, 4, 8, None, 60)


def test_judged_against_the_reference_or_nothing(bench):
    result = _measured(bench)
    figure = result.figures["all_reduce_busbw_gbps"]
    above = {"rccl_tests.all_reduce_busbw_gbps": Reference(
        "rccl_tests.all_reduce_busbw_gbps", figure * 1.5, -0.1, None, "GB/s")}
    judged = judge_against_references(result, above, {}, "beverin", gpu=True)
    assert judged.status == "failed"
    assert judged.reason.startswith(f"rccl_tests.all_reduce_busbw_gbps {figure:.4g} GB/s "
                                    "outside the beverin reference")
    below = {"rccl_tests.all_reduce_busbw_gbps": Reference(
        "rccl_tests.all_reduce_busbw_gbps", figure, -0.1, None, "GB/s")}
    judged = judge_against_references(result, below, {}, "beverin", gpu=True)
    assert judged.status == "passed" and "within the beverin reference" in judged.reason
    entries = {e["figure"]: e for e in judged.figures["judged_against"]}
    assert entries["rccl_tests.all_reduce_busbw_gbps"]["verdict"] == "passed"
    assert entries["rccl_tests.all_gather_busbw_gbps"]["against"] == "nothing"
    judged = judge_against_references(result, {}, {}, None, gpu=True)
    assert judged.status == "passed"
    nothing = {e["figure"]: e for e in judged.figures["judged_against"]}
    assert set(nothing) == {f"rccl_tests.{op}_busbw_gbps"
                            for op in ("all_reduce", "all_gather", "reduce_scatter")}
    assert all(e["against"] == "nothing" and e["why"] == "no reference and no generic floor "
               "for this figure" for e in nothing.values())
    assert nothing["rccl_tests.reduce_scatter_busbw_gbps"]["value"] == \
        result.figures["reduce_scatter_busbw_gbps"]


def test_merge_across_nodes_names_the_failing_node(make_context, bench):
    good = _measured(bench)
    bad = failed("rccl_tests", "all_reduce_perf exited 1: hipErrorNoDevice")
    waiting = passed("rccl_tests", "x")  # a non-leader's result is never used
    ctx = make_context(mode="gpu", hosts=["nid1", "nid1", "nid2", "nid2"])
    merged = rccl_tests.merge([good, waiting, bad, waiting], ctx)
    assert merged.status == "failed"
    assert merged.reason == "nid2: all_reduce_perf exited 1: hipErrorNoDevice"
    assert [(n["rank"], n["host"], n["status"]) for n in merged.figures["per_node"]] == [
        (0, "nid1", "passed"), (2, "nid2", "failed")]
    assert merged.figures["per_node"][0]["all_reduce_busbw_gbps"] == \
        good.figures["all_reduce_busbw_gbps"]
    one = rccl_tests.merge([good, waiting], make_context(mode="gpu", hosts=["nid1", "nid1"]))
    assert one.status == "passed" and "per_node" not in one.figures


def test_parser_reads_real_output_shapes():
    text = """# nThread 1 nGpus 8 minBytes 8388608 maxBytes 4294967296 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 0 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608       2097152     float     sum      -1    171.3   48.97   85.70    N/A    170.8   49.11   85.94    N/A
  4294967296    1073741824     float     sum      -1  30233.6  142.06  248.60    N/A  30140.2  142.50  249.37    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 167.15
"""
    rows = parse_rccl_tests_rows(text)
    assert [(r.bytes, r.busbw_gbs, r.algbw_gbs, r.wrong) for r in rows] == [
        (8388608, 85.70, 48.97, None), (4294967296, 248.60, 142.06, None)]
    assert rccl_tests.largest(rows).busbw_gbs == 248.60


def test_runner_reports_the_check_in_cpu_mode(tmp_path, bench):
    """The runner, for real: --checks rccl_tests in CPU mode is a no_gpu skip in a report
    that matches the schema."""
    report_path = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), rccl_tests.BIN_DIR_ENV: str(bench)}
    done = subprocess.run([sys.executable, "-m", "imagebuild.inimage", "--cpu", "--allow-cpu",
                           "--no-doctor", "--checks", "rccl_tests", "--report",
                           str(report_path)], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(report_path.read_text())
    assert_valid_report(report)
    result = check(report, "rccl_tests")
    assert (result["status"], result["cause"]) == ("skipped", "no_gpu")
    assert result["reason"] == "rccl-tests need GPUs (CPU mode)"


def test_a_benchmark_past_its_time_fails_with_what_it_printed(tmp_path):
    """A hung benchmark must not outlast the ranks waiting for the result: it is stopped
    at its share of --timeout and the check fails naming it."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for name in rccl_tests.BINARIES.values():
        script = directory / name
        script.write_text(f"#!{sys.executable}\nimport time\nprint('# nThread 1 nGpus 4', "
                          "flush=True)\ntime.sleep(30)\n")
        script.chmod(0o755)
    result = rccl_tests.measure(directory, 4, 8, None, 1.0)
    assert result.status == "failed"
    assert result.reason.startswith("all_reduce_perf ran past 1 s (a quarter of --timeout)")
    assert result.figures["results"]["all_reduce"]["output_tail"] == ["# nThread 1 nGpus 4"]
