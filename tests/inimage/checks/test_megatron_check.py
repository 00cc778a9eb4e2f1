"""The megatron check's launch and judgement, at the seam where it starts Megatron: a
stand-in ``pretrain_gpt.py`` prints what Megatron prints (the formats the
tests/inimage/model/test_megatron_run.py tests read from Megatron's source) and records the
environment and arguments it got. The real pretrain_gpt.py runs in tests/e2e (CPU probe)
and on a GPU (the closing notes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.inimage.check_context import Context
from imagebuild.inimage.checks import megatron
from imagebuild.inimage.model.llama import LLAMA_3_1_8B
from imagebuild.inimage.model.megatron_run import MegatronRun, pretrain_arguments

STAND_IN = '''
import json, os, sys
with open(os.environ["RECORD"], "w") as out:
    json.dump({"argv": sys.argv[1:], "env": dict(os.environ)}, out)
iters = int(sys.argv[sys.argv.index("--train-iters") + 1])
losses = [float(x) for x in os.environ["LOSSES"].split(",")]
for i in range(1, iters + 1):
    print(f" [2026-11-26 01:00:00] iteration {i:8d}/{iters:8d} | consumed samples: {i:12d} |"
          f" elapsed time per iteration (ms): {1500.0 if i == 1 else 1000.0:.1f} |"
          f" throughput per GPU (TFLOP/s/GPU): {100.0 if i == 1 else 300.0:.1f} |"
          f" learning rate: 1.000000E-04 | lm loss: {losses[i - 1]:.6E} |", flush=True)
if os.environ.get("EXIT"):
    print(f"[exiting program at iteration {iters}] datetime: 2026-11-26 01:00:09 ")
sys.exit(int(os.environ.get("CODE", "0")))
'''


@pytest.fixture
def megatron_dir(tmp_path: Path) -> Path:
    root = tmp_path / "megatron-lm"
    root.mkdir()
    (root / "pretrain_gpt.py").write_text(STAND_IN)
    return root


def _run(ctx: Context, directory: Path, monkeypatch: pytest.MonkeyPatch, *, losses: str,
         exit_line: bool = True, code: int = 0) -> tuple[object, dict]:
    record = directory.parent / "record.json"
    monkeypatch.setenv("RECORD", str(record))
    monkeypatch.setenv("LOSSES", losses)
    monkeypatch.setenv("CODE", str(code))
    if exit_line:
        monkeypatch.setenv("EXIT", "1")
    run = MegatronRun(model=megatron.architecture(LLAMA_3_1_8B.with_layers(4)), seq=4096,
                      world_size=1, iterations=5)
    result = megatron.judge_run(ctx, run, {"workload": "proxy"},
                                megatron.launch(ctx, directory, pretrain_arguments(run)))
    return result, json.loads(record.read_text())


def test_megatrons_figures_are_reported_after_the_warm_up(
        make_context: Callable[..., Context], megatron_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = make_context("--megatron-warmup", "1")
    result, seen = _run(ctx, megatron_dir, monkeypatch, losses="11,10.5,10,9.5,9")
    assert result.status == "passed", result.reason
    figures = result.figures
    assert figures["tflops_per_gpu"] == pytest.approx(300.0)  # iteration 1 left out
    assert figures["tflops_per_gpu_all_iterations"] == pytest.approx((100 + 4 * 300) / 5)
    assert figures["tokens_per_s_per_gpu"] == pytest.approx(4096.0)
    assert figures["workload"] == "proxy" and "PROXY" in result.reason
    # One Megatron rank per validation rank, with Megatron's environment.
    assert seen["env"]["RANK"] == "0" and seen["env"]["WORLD_SIZE"] == "1"
    assert seen["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert seen["argv"] == pretrain_arguments(MegatronRun(
        model=megatron.architecture(LLAMA_3_1_8B.with_layers(4)), seq=4096, world_size=1,
        iterations=5))


def test_without_the_exit_line_the_run_fails_as_the_reframe_check_would(
        make_context: Callable[..., Context], megatron_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _run(make_context("--megatron-warmup", "1"), megatron_dir, monkeypatch,
                     losses="11,10.5,10,9.5,9", exit_line=False)
    assert result.status == "failed"
    assert "exiting program at iteration 5" in result.reason


def test_a_loss_that_does_not_fall_fails(make_context: Callable[..., Context],
                                         megatron_dir: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _run(make_context("--megatron-warmup", "1"), megatron_dir, monkeypatch,
                     losses="9,10,11,12,13")
    assert result.status == "failed" and "lm loss did not fall" in result.reason


def test_a_crashed_rank_fails_with_its_last_lines(make_context: Callable[..., Context],
                                                  megatron_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    result, _ = _run(make_context("--megatron-warmup", "1"), megatron_dir, monkeypatch,
                     losses="11,10.5,10,9.5,9", code=3)
    assert result.status == "failed"
    assert "Megatron rank 0 exited 3" in result.reason
    assert any("iteration        5/       5" in line for line in result.details)


def test_no_megatron_in_the_image_is_not_applicable(make_context: Callable[..., Context],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEGATRON_LM_DIR", raising=False)
    result = megatron.run(make_context())
    assert result.status == "skipped" and result.cause == "not_applicable"


def test_a_directory_without_pretrain_gpt_fails(make_context: Callable[..., Context],
                                                tmp_path: Path) -> None:
    result = megatron.run(make_context("--megatron-dir", str(tmp_path)))
    assert result.status == "failed" and "pretrain_gpt.py" in result.reason


def test_a_crash_names_the_failure_class_its_log_shows(
        make_context: Callable[..., Context], megatron_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in prints a real HIP OOM line (kyuz0/amd-strix-halo-image-video-toolboxes#3)
    before it crashes: the reason names the class and the line."""
    (megatron_dir / "pretrain_gpt.py").write_text(STAND_IN.replace(
        "sys.exit(", "print(os.environ.get('EXTRA', ''), flush=True)\nsys.exit("))
    monkeypatch.setenv("EXTRA", "torch.OutOfMemoryError: HIP out of memory. Tried to "
                       "allocate 3.31 GiB. GPU 0 has a total capacity of 128.00 GiB")
    result, _ = _run(make_context("--megatron-warmup", "1"), megatron_dir, monkeypatch,
                     losses="11,10.5,10,9.5,9", code=1)
    assert result.status == "failed"
    assert "its log says rank 0: oom x1: torch.OutOfMemoryError: HIP out of memory" \
        in result.reason
    assert result.figures["log_signatures"]["0"]["oom"]["count"] == 1


def test_a_finished_run_whose_log_names_an_nccl_error_fails(
        make_context: Callable[..., Context], megatron_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (megatron_dir / "pretrain_gpt.py").write_text(STAND_IN.replace(
        "sys.exit(", "print(os.environ.get('EXTRA', ''), flush=True)\nsys.exit("))
    monkeypatch.setenv("EXTRA", "host:1:2 [0] NCCL WARN Bootstrap Root : rank 1 of 8 ranks "
                       "has already checked in")
    result, _ = _run(make_context("--megatron-warmup", "1"), megatron_dir, monkeypatch,
                     losses="11,10.5,10,9.5,9")
    assert result.status == "passed", result.reason  # a warning is reported, not failed
    assert result.figures["log_signatures"]["0"]["nccl_warning"]["count"] == 1
    monkeypatch.setenv("EXTRA", "ncclSystemError: System call (e.g. socket, malloc) or "
                       "external library call failed or device error.")
    result, _ = _run(make_context("--megatron-warmup", "1"), megatron_dir, monkeypatch,
                     losses="11,10.5,10,9.5,9")
    assert result.status == "failed" and "the logs name failures: rank 0: nccl_error" \
        in result.reason
