"""A real CPU training step of the validation model, profiled by real torch, against the
problems derived from the model's configuration."""

import json
from dataclasses import replace

import pytest
import torch

from imagebuild.inimage.model.llama import LLAMA_CPU_SMOKE
from imagebuild.inimage.tuning.problems import time_shares
from imagebuild.inimage.tuning.shapes import profile_training_step
from imagebuild.inimage.tuning.step_problems import training_step_problems
from imagebuild.inimage.tuning.trace import load_events, problems_from_events, problems_from_trace

SEQ = 48


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    profile_training_step(str(path), LLAMA_CPU_SMOKE, SEQ, device="cpu")
    return path


def as_counts(stats):
    return {s.problem: s.count for s in stats}


def test_trace_gives_the_problems_derived_from_the_config(trace_path):
    stats, summary = problems_from_trace(trace_path)
    expected = training_step_problems(replace(LLAMA_CPU_SMOKE, max_seq_len=SEQ), SEQ,
                                      data_type="f32_r")
    assert as_counts(stats) == as_counts(expected)
    assert summary["gemm_ops"] == sum(s.count for s in expected)
    assert summary["assumed_transposes"] == 0
    shares = time_shares(stats)
    assert all(share is not None and share > 0 for share in shares)
    assert sum(shares) == pytest.approx(1.0)
    assert [s.time_us for s in stats] == sorted((s.time_us for s in stats), reverse=True)


def test_without_strides_the_linear_rule_gives_the_same_problems(trace_path):
    events = load_events(trace_path)
    for event in events:
        (event.get("args") or {}).pop("Input Strides", None)
    stats, summary = problems_from_events(events)
    with_strides, _ = problems_from_trace(trace_path)
    assert as_counts(stats) == as_counts(with_strides)
    assert summary["with_strides"] == 0 and summary["assumed_transposes"] == 0


def test_strides_tell_a_transposed_view_that_is_not_a_weight(tmp_path):
    a, b = torch.randn(40, 24), torch.randn(56, 24)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.mm(a, b.t())          # row-major out[40, 56], mat2 a transposed view
        torch.mm(a, b.t().contiguous())  # both row-contiguous
        torch.mm(a.t().contiguous().t(), b.t().contiguous())  # mat1 a transposed view
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    if "Input Strides" not in json.dumps(load_events(path)):
        pytest.skip(f"torch {torch.__version__} records no Input Strides")
    stats, _ = problems_from_trace(path)
    found = {(s.problem.m, s.problem.n, s.problem.k, s.problem.trans_a, s.problem.trans_b)
             for s in stats}
    # hipBLASLt's A is mat2 and its B is mat1.
    assert found == {(56, 40, 24, "T", "N"), (56, 40, 24, "N", "N"), (56, 40, 24, "N", "T")}
