"""The vendors' and sites' figures in gpus.json: each cited, CSCS's checked against its
own source (the ReFrame check in the source fixtures), and held to a run only when the
run's configuration is the vendor's."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from imagebuild.inimage.gpu_data import UsageError, _check_data, load_gpu_data
from imagebuild.inimage.result import passed
from imagebuild.inimage.vendor_figures import for_gpu, judge_vendor_figures
from testbed.source_mirror import fixtures_dir

DATA = load_gpu_data()
GIB = 2**30


def test_every_model_the_suites_cover_has_a_cited_figure() -> None:
    for model in ("MI300X", "MI300A", "MI250X", "MI355X", "H100"):
        assert for_gpu(DATA, model), model
    for entry in DATA["vendor_figures"]:
        assert entry["source"] and entry["url"].startswith("https://"), entry
        assert entry["when"], entry
    assert not for_gpu(DATA, "H200")  # none found; the table's about text says so
    assert any("H200" in line for line in DATA["about"])


def _xccl_references(tmp_path: Path) -> dict[str, dict[str, tuple]]:
    bundle = fixtures_dir() / "cscs-reframe-tests.bundle"
    assert bundle.is_file(), f"source fixture missing: {bundle}"
    repo = tmp_path / "cscs"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    heads = subprocess.run(["git", "-C", str(repo), "bundle", "unbundle", str(bundle)],
                           capture_output=True, text=True, check=True).stdout.split()
    text = subprocess.run(["git", "-C", str(repo), "show",
                           f"{heads[0]}:checks/microbenchmarks/xccl/xccl_tests.py"],
                          capture_output=True, text=True, check=True).stdout
    literal = re.search(r"reference_per_test = (\{.*?\n    \})\n", text, re.DOTALL)
    assert literal, "reference_per_test not found in xccl_tests.py"
    return ast.literal_eval(literal.group(1))


def test_cscs_references_are_the_reframe_checks_own(tmp_path: Path) -> None:
    references = _xccl_references(tmp_path)["all_reduce"]
    for model, uarch in (("MI300A", "mi300"), ("MI250X", "mi200"), ("GH200", "gh200")):
        [entry] = [e for e in for_gpu(DATA, model) if e["check"] == "collectives"]
        value, lower, upper, unit = references[uarch]["GB/s"]
        assert (entry["value"], entry["lower"], entry["upper"], entry["unit"]) == (
            value, lower, upper, unit), model
        assert entry["when"]["bytes"] == GIB and entry["when"]["nodes"] == 2


def collectives_result(busbw: float, nodes: int, world: int) -> object:
    return passed("collectives", "measured", {
        "world_size": world, "nodes": nodes,
        "results": [{"op": "all_reduce", "bytes": GIB, "requested_bytes": GIB,
                     "source": "size sweep", "busbw_gbps": busbw}]})


@pytest.mark.parametrize(("busbw", "status", "words"), [
    (120.0, "failed", "below CSCS"), (139.0, "passed", "at least CSCS"),
    (160.0, "passed", "above the reference's upper bound")])
def test_a_two_node_mi300a_all_reduce_is_held_to_cscs(busbw: float, status: str,
                                                      words: str) -> None:
    result = judge_vendor_figures(collectives_result(busbw, 2, 8), for_gpu(DATA, "MI300A"), 2)
    assert result.status == status
    [row] = result.figures["vendor_figures"]
    assert row["applies"] and words in row["text"], row
    if status == "failed":
        assert "collectives.busbw_gbps 120 GB/s below CSCS" in result.reason
        assert "133" in result.reason  # 140 - 5 %


def test_a_one_node_run_is_not_compared_with_a_two_node_reference() -> None:
    result = judge_vendor_figures(collectives_result(50.0, 1, 4), for_gpu(DATA, "MI300A"), 1)
    assert result.status == "passed"
    [row] = result.figures["vendor_figures"]
    assert not row["applies"] and "nodes 1, not 2" in row["why"]


def megatron_result(precision: str, micro_batch: int, world: int, tflops: float) -> object:
    setup = {"model": {"layers": 32}, "seq": 8192, "world_size": world, "tensor_parallel": 1,
             "micro_batch": micro_batch, "precision": precision,
             "activation_checkpointing": "none", "global_batch": micro_batch * world,
             "workload": "full"}
    return passed("megatron", "measured", {"configuration": setup, "workload": "full",
                                           "precision": precision, "tflops_per_gpu": tflops,
                                           "tokens_per_s_per_gpu": 5000.0})


def test_cvs_floors_are_not_applied_to_another_configuration() -> None:
    """This suite's Megatron steps every micro-batch (global batch = micro-batch x ranks);
    CVS's run accumulates to a global batch of 128: never the same run, so no verdict."""
    result = judge_vendor_figures(megatron_result("bf16", 2, 8, 200.0),
                                  for_gpu(DATA, "MI300X"), 1)
    assert result.status == "passed"
    rows = [r for r in result.figures["vendor_figures"] if r["figure"].startswith("megatron")]
    assert len(rows) == 2 and not any(r["applies"] for r in rows)
    assert "precision 'bf16', not 'fp8'" in rows[0]["why"]
    assert "global_batch 16, not 128" in rows[0]["why"]


def test_a_matching_run_below_the_cvs_floor_fails() -> None:
    entries = [dict(e, when={k: v for k, v in e["when"].items() if k != "global_batch"})
               for e in for_gpu(DATA, "MI300X") if e["check"] == "megatron"]
    result = judge_vendor_figures(megatron_result("fp8", 2, 8, 300.0), entries, 1)
    assert result.status == "failed"
    assert "megatron.tflops_per_gpu 300 TFLOP/s/GPU below AMD Cluster Validation Suite" \
        in result.reason and "5000 tokens/s/GPU below" in result.reason


def test_a_broken_entry_is_refused(tmp_path: Path) -> None:
    bad = dict(DATA, vendor_figures=[{"gpus": ["MI999"], "check": "gemm", "figure": "x",
                                      "kind": "floor", "value": 1, "when": {}, "by": "x",
                                      "source": "x"}])
    with pytest.raises(UsageError, match="unknown GPU MI999"):
        _check_data(bad, tmp_path / "gpus.json")
