"""The train check on CPU for real: its configuration and proxy label, an out-of-memory
as a failed result, and the report written after every check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from imagebuild.inimage.checks import train
from imagebuild.inimage.model.llama import LLAMA_CPU_SMOKE, parameter_counts
from tests.support.validate import REPO, assert_valid_report, check


def test_cpu_train_step_reports_its_configuration_as_a_proxy(make_context,
                                                             one_rank_group: None) -> None:
    ctx = make_context("--train-seq", "64", "--train-steps", "3", "--train-warmup", "1")
    result = train.run(ctx)
    figures = result.figures
    assert result.status == "passed", result.reason
    assert result.reason.startswith("PROXY, not the full model (CPU mode")
    setup = figures["configuration"]
    assert setup["workload"] == "proxy" == figures["workload"]
    assert (setup["layers"], setup["full_layers"], setup["seq"], setup["micro_batch"]) == (
        2, 32, 64, 1)
    assert setup["activation_checkpointing"] == "none" and setup["precision"] == "float32"
    assert setup["world_size"] == 1 and setup["compile"] is False
    assert figures["proxy"]["reason"].startswith("CPU mode")
    spread = figures["step_time_spread_s"]
    assert spread["count"] == 3 and spread["min"] <= spread["median"] <= spread["max"]


def test_cpu_train_step_with_checkpointing_recomputes_every_other_block(
        make_context, one_rank_group: None) -> None:
    ctx = make_context("--train-seq", "32", "--train-steps", "2", "--train-layers", "2",
                       "--activation-checkpointing", "selective")
    result = train.run(ctx)
    assert result.status == "passed", result.reason
    assert result.figures["checkpointed_blocks"] == 1
    assert result.figures["configuration"]["activation_checkpointing"] == "selective"
    # the one recomputed block's forward is in the hardware FLOPs, not in the model FLOPs
    config = LLAMA_CPU_SMOKE
    block = parameter_counts(config)["per_layer"]
    assert (result.figures["hardware_flops_per_token"] - result.figures["flops_per_token"]
            == 2 * block + 4 * config.n_heads * config.head_dim * 32)
    assert "recomputation not counted" in result.figures["flops_convention"]


@pytest.mark.parametrize("error", [
    torch.cuda.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 1.02 GiB is free."),
    RuntimeError("HIP out of memory. Tried to allocate 2.00 GiB"),
])
def test_out_of_memory_is_a_failed_result_saying_what_ran_out(
        make_context, monkeypatch: pytest.MonkeyPatch, one_rank_group: None,
        error: Exception) -> None:
    real_build = train.build

    def build_then_run_out(*args, **kwargs):
        model, optimizer, info = real_build(*args, **kwargs)

        def forward(*_: object, **__: object) -> torch.Tensor:
            raise error

        model.forward = forward
        return model, optimizer, info

    monkeypatch.setattr(train, "build", build_then_run_out)
    ctx = make_context("--train-seq", "32", "--train-steps", "2")
    result = train.run(ctx)
    assert result.status == "failed"
    assert result.reason.startswith("out of memory on rank 0 during the first training step")
    assert "host memory ran out" in result.reason
    assert str(error).splitlines()[0][:40] in result.reason
    assert "tried proxy workload 2 blocks, seq 32, micro-batch 1, AC none" in result.reason
    assert "not retried smaller" in result.reason
    assert "Traceback" not in result.reason and result.figures["out_of_memory"] is True


def test_other_errors_still_raise(make_context, monkeypatch: pytest.MonkeyPatch,
                                  one_rank_group: None) -> None:
    def broken(*_: object, **__: object):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(train, "build", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        train.run(make_context("--train-seq", "32"))


def test_report_on_disk_after_each_check_survives_a_killed_run(tmp_path: Path) -> None:
    """A run killed in the middle (a job's time limit) leaves the finished checks."""
    report = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen(
        [sys.executable, "-m", "imagebuild.inimage", "--checks",
         "environment,devices,train", "--nproc", "1", "--allow-cpu", "--train-steps",
         "100000", "--report", str(report)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and (
                not report.exists()
                or json.loads(report.read_text())["checks_pending"] != ["train"]):
            time.sleep(0.2)  # until the checks before train are on disk
        assert proc.poll() is None, proc.stderr.read().decode()
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes the stderr pipe
    data = json.loads(report.read_text())  # atomic writes: never half a file
    assert data["complete"] is False and data["checks_pending"] == ["train"]
    assert [c["name"] for c in data["checks"]] == ["environment", "devices"]
    assert check(data, "devices")["cause"] == "no_gpu"
    assert_valid_report(data)
    assert not list(tmp_path.glob(".r.json.*.tmp"))
