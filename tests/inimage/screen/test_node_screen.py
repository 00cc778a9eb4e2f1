"""One node's screen, end to end: the real command (``python -m imagebuild.inimage
screen``) on node trees, its GPU probe a real subprocess (on the CPU, as a proxy: no GPU
here). A healthy node passes; each planted fault fails the node and is named; a probe
that hangs is killed at its deadline; the doctor's items count where the image is known."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from imagebuild.inimage.screen.node_screen import LINE_PREFIX
from tests.support.screen_trees import FAULTS, healthy, plant

REPO = Path(__file__).resolve().parents[3]


def screen(root: Path, *args: str, env: dict[str, str] | None = None
           ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any], float]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    full.update(PYTHONPATH=str(REPO), PATH="/usr/bin:/bin", **(env or {}))
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "imagebuild.inimage", "screen", "--cpu",
                           "--root", str(root), *args], env=full, capture_output=True,
                          text=True, timeout=120, check=False)
    seconds = time.monotonic() - began
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith(LINE_PREFIX))
    return done, json.loads(line[len(LINE_PREFIX):]), seconds


def test_a_healthy_node_passes(tmp_path: Path) -> None:
    done, report, seconds = screen(healthy(tmp_path), "--out-dir", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert report["verdict"] == "PASS" and report["node"] == "nid001"
    statuses = {f["item"]: f["status"] for f in report["findings"]}
    assert statuses == {"gpu-processes": "pass", "memlock": "pass", "shm": "pass",
                        "kernel-log": "pass", "links": "pass", "doctor": "skip",
                        "smi-latency": "skip", "gpu": "pass"}
    assert report["gpus"][0]["finite"] is True and report["cpu_proxy"] is True
    assert (tmp_path / "out/nid001.verdict").read_text() == "PASS\n"
    assert json.loads((tmp_path / "out/nid001.json").read_text())["verdict"] == "PASS"
    assert seconds < 20, seconds


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_planted_fault_fails_the_node_and_is_named(tmp_path: Path, fault: str) -> None:
    root = healthy(tmp_path)
    plant(root, fault)
    done, report, _ = screen(root)
    assert done.returncode == 1, done.stderr
    assert report["verdict"] == "FAIL"
    assert [r.split(":")[0] for r in report["reasons"]] == [FAULTS[fault]], report["reasons"]
    assert f"FAIL ({report['duration_s']:.1f} s): {FAULTS[fault]}:" in done.stderr


def test_a_hung_probe_is_killed_at_its_deadline(tmp_path: Path) -> None:
    done, report, seconds = screen(healthy(tmp_path), "--per-gpu-timeout", "3",
                                   env={"IMAGEBUILD_TEST_SCREEN_HANG": "0"})
    assert done.returncode == 1
    [reason] = report["reasons"]
    assert reason.startswith("gpu: CPU did not finish within 3 s (killed)"), reason
    assert seconds < 3 + 6, seconds


def test_the_doctor_items_count_where_the_image_is_known(tmp_path: Path) -> None:
    """A node whose driver is too old for the image (the doctor's own case) fails the
    screen with the doctor's reason."""
    from tests.inimage.doctor.conftest import build_case

    case = build_case("driver-too-old-mi300x", tmp_path)
    root = case.root
    healthy_root = healthy(tmp_path / "h")
    for name in ("proc/self/limits", "proc/meminfo", "dev/kmsg", "proc/uptime"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text((healthy_root / name).read_text())
    _done, report, _ = screen(root, "--shm-min-gib", "0", env=case.env)
    assert report["verdict"] == "FAIL"
    driver = next(f for f in report["findings"] if f["item"] == "driver")
    assert driver["status"] == "fail" and "is tested with ROCm" in driver["reason"]
