"""`imagebuild report` compares tokens/s only between train steps of one configuration."""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagebuild.commands.report import run as report_command
from imagebuild.validate.compare import comparison_notes, comparison_rows
from tests.support.validate import REPO, assert_valid_report, check


@pytest.fixture(scope="module")
def train_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real one-rank CPU train step's report, from the in-image runner."""
    workdir = tmp_path_factory.mktemp("train-report")
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEBUILD_")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        [sys.executable, "-m", "imagebuild.inimage", "--checks", "train", "--nproc",
         "1", "--allow-cpu", "--train-steps", "2", "--report", "r.json"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PROXY" in proc.stdout  # the terminal says it in words
    report = json.loads((workdir / "r.json").read_text())
    assert_valid_report(report)
    return report


def _row(rows: list[tuple[str, list[str]]], title: str) -> list[str]:
    return next(cells for label, cells in rows if label.startswith(title))


def test_same_configuration_shows_tokens_per_s(train_report: dict[str, Any]) -> None:
    report = train_report
    faster = copy.deepcopy(report)
    check(faster, "train")["figures"]["tokens_per_s_per_gpu"] *= 2
    rows = comparison_rows([report, faster])
    cells = _row(rows, "train tokens/s/GPU")
    assert cells[2] == "2.00x" and "not compared" not in cells
    assert _row(rows, "train configuration")[0].startswith("proxy: 2 blocks, seq 256")
    assert not any("tokens/s not compared" in n for n in comparison_notes([report, faster]))


def test_different_configurations_suppress_tokens_per_s_with_the_reason(
        train_report: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = train_report
    deeper = copy.deepcopy(report)
    figures = check(deeper, "train")["figures"]
    figures["configuration"]["layers"] = 6
    figures["configuration"]["activation_checkpointing"] = "full"
    figures["tokens_per_s_per_gpu"] *= 3
    rows = comparison_rows([report, deeper])
    assert _row(rows, "train tokens/s/GPU") == ["not compared", "not compared", "see note"]
    assert _row(rows, "train TFLOP/s/GPU")[0] != "not compared"
    notes = comparison_notes([report, deeper])
    assert any("layers 2 vs 6" in n and "activation_checkpointing none vs full" in n
               and "TFLOP/s/GPU and MFU" in n for n in notes)
    assert any(n.startswith("report 1: the train step is a proxy") for n in notes)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(report))
    b.write_text(json.dumps(deeper))
    code = report_command(argparse.Namespace(reports=[a, b], plot=None, no_plot=True))
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0 and "tokens/s not compared: the train steps differ" in out


#: A Python that cannot import matplotlib (a core `pip install .` without the report extra).
NO_MATPLOTLIB = """
import sys

class NoMatplotlib:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "matplotlib":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoMatplotlib())
"""


def test_the_core_install_prints_the_table_and_says_why_there_is_no_plot(
        train_report: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_MATPLOTLIB)
    (tmp_path / "r.json").write_text(json.dumps(train_report))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(tmp_path / "site"), str(REPO))),
               COLUMNS="200")

    def report(*flags: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "imagebuild", "report", "r.json", *flags],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120, check=False)

    default = report()
    assert default.returncode == 0, default.stdout + default.stderr
    assert "train TFLOP/s/GPU" in default.stdout
    assert "plot skipped" in default.stdout and "imagebuild[report]" in default.stdout
    assert not (tmp_path / "reports").exists()
    asked = report("--plot", "compare.png")  # an explicit plot is an error without it
    assert asked.returncode != 0 and "imagebuild[report]" in asked.stderr
    assert not (tmp_path / "compare.png").exists()


def test_an_old_report_with_fsdp_sizes_compares_with_a_new_one(
        train_report: dict[str, Any]) -> None:
    """Reports written before the Megatron bucket sizes had their own key kept them under
    ``fsdp_sizes``: report still reads them beside a new report's."""
    old, new = copy.deepcopy(train_report), copy.deepcopy(train_report)
    rows = {"reduce_scatter_302006272": 40.0, "all_gather_151003136": 50.0}
    old["checks"].append({"name": "collectives", "status": "passed", "reason": "old",
                          "cause": None, "figures": {"fsdp_sizes": rows}, "details": [],
                          "duration_s": 1.0})
    new["checks"].append({"name": "collectives", "status": "passed", "reason": "new",
                          "cause": None, "figures": {"megatron_bucket_sizes": {
                              k: v * 2 for k, v in rows.items()}}, "details": [],
                          "duration_s": 1.0})
    table = comparison_rows([old, new])
    assert _row(table, "reduce_scatter 302006272 B") == ["40.0", "80.0", "2.00x"]
    assert _row(table, "all_gather 151003136 B") == ["50.0", "100.0", "2.00x"]


def test_fsdp2_rows_name_the_dtype_each_report_measured_in(train_report: dict[str, Any]) -> None:
    """A CPU run's FSDP2 collectives are float32 (no mixed precision), a GPU run's all-gather
    bf16: the row says what the reports measured, not a fixed "(bf16)"."""
    cpu, gpu = copy.deepcopy(train_report), copy.deepcopy(train_report)

    def collectives(dtype: str, busbw: float) -> dict[str, Any]:
        return {"name": "collectives", "status": "passed", "reason": "r", "cause": None,
                "details": [], "duration_s": 1.0, "figures": {"training_sizes": [
                    {"op": "all_gather", "bytes": 1024, "dtype": dtype, "busbw_gbps": busbw,
                     "source": "FSDP2 per block (the CPU proxy model)"}]}}

    cpu["checks"].append(collectives("float32", 1.5))
    gpu["checks"].append(collectives("bfloat16", 300.0))
    assert [label for label, _ in comparison_rows([cpu])
            if label.startswith("FSDP2")] == ["FSDP2 block all_gather (float32) [GB/s]"]
    assert _row(comparison_rows([cpu, gpu]), "FSDP2 block all_gather (float32 / bfloat16)") \
        == ["1.5", "300.0", "200.00x"]
