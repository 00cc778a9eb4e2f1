"""No hangs, and a report either way: real runner processes over gloo on this machine.

- a two-rank run whose second rank never starts ends within --timeout plus a few seconds,
  exit 2, with a report (written before the rendezvous, rewritten when it failed) naming
  the absent rank, and under SLURM the host it was placed on;
- a rank stuck before a check makes the exchange after it time out: the run ends, exit 2,
  and the report names the rank and where it was;
- the groups and repeated_init checks pass on CPU, and a rank that leaves out one group's
  all-reduce makes groups fail naming that group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from imagebuild.inimage.job_rank import Launch, free_port
from imagebuild.inimage.rendezvous import RendezvousFailed, slurm_placement
from tests.support.validate import assert_valid_report, check

REPO = Path(__file__).resolve().parents[2]
QUIET = {"TORCH_CPP_LOG_LEVEL": "FATAL"}


def runner(args: list[str], env: dict[str, str], timeout: float = 300
           ) -> tuple[subprocess.CompletedProcess[str], float]:
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    full.update(QUIET, PYTHONPATH=str(REPO), **env)
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "imagebuild.inimage", "--cpu", "--allow-cpu",
                           *args], env=full, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return done, time.monotonic() - began


def report_of(path: Path) -> dict[str, Any]:
    report = json.loads(path.read_text())
    assert_valid_report(report)
    return report


@pytest.mark.slow
def test_an_absent_rank_ends_the_run_within_the_timeout_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done, seconds = runner(["--checks", "environment", "--timeout", "5", "--report", str(path)],
                           {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
                            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    assert done.returncode == 2, done.stdout + done.stderr
    assert seconds < 5 + 6, seconds  # the timeout plus interpreter start and the report
    report = report_of(path)
    assert report["stopped_by"] == "rendezvous" and report["complete"] is False
    assert report["summary"]["exit_code"] == 2
    [entry] = report["checks"]
    assert entry["name"] == "rendezvous" and entry["status"] == "failed"
    assert "1 of 2 rank(s) never joined within 5 s: rank 1" in entry["reason"]
    assert entry["figures"]["missing_ranks"] == [{"rank": 1, "expected_host": None}]
    assert entry["figures"]["joined"][0]["rank"] == 0
    # The facts rank 0 knew alone are in it: versions, node, doctor, what was pending.
    assert report["versions"]["torch"] and report["node"]["kernel"]
    assert report["doctor"]["ran"] is False and report["checks_pending"] == ["environment"]
    assert "rendezvous failed" in done.stderr


@pytest.mark.slow
def test_under_slurm_the_report_names_the_host_of_the_absent_rank(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done, _ = runner(["--checks", "environment", "--timeout", "3", "--report", str(path)],
                     {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                      "SLURM_JOB_NODELIST": "here,nid002", "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    assert done.returncode == 2, done.stderr
    entry = report_of(path)["checks"][0]
    assert entry["figures"]["missing_ranks"] == [{"rank": 1, "expected_host": "nid002"}]
    assert entry["figures"]["missing_hosts"] == ["nid002"]
    assert "rank 1 (placed on nid002); no rank came from nid002" in entry["reason"]


def test_the_report_is_on_disk_while_rank_0_waits(tmp_path: Path) -> None:
    """Before the rendezvous: the waiting report exists (provisional entry, complete false)."""
    path = tmp_path / "r.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update(QUIET, PYTHONPATH=str(REPO), RANK="0", WORLD_SIZE="2", LOCAL_RANK="0",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.Popen([sys.executable, "-m", "imagebuild.inimage", "--cpu", "--checks",
                             "environment", "--timeout", "30", "--report", str(path)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 25
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        report = report_of(path)
    finally:
        proc.kill()
        proc.wait()
    assert report["stage"] == "rendezvous" and report["complete"] is False
    [entry] = report["checks"]
    assert entry["name"] == "rendezvous" and entry["cause"] == "incomplete"
    assert "waiting at 127.0.0.1:" in entry["reason"] and report["node"]["kernel"]


@pytest.mark.slow
def test_a_rank_stuck_before_a_check_is_named_and_the_run_ends(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done, seconds = runner(["--checks", "environment,groups", "--timeout", "5", "--report",
                            str(path)], {"IMAGEBUILD_TEST_HANG_RANK": "1:groups:12"})
    assert done.returncode == 2, done.stdout + done.stderr
    report = report_of(path)
    assert report["stopped_by"] == "timeout" and report["summary"]["exit_code"] == 2
    assert [c["name"] for c in report["checks"]] == ["environment", "groups"]
    groups = check(report, "groups")
    assert groups["status"] == "failed"
    assert "rank 1 (" in groups["reason"] and "in check groups" in groups["reason"]
    assert groups["figures"]["stalled_ranks"][0]["rank"] == 1
    assert seconds < 12 + 30, seconds  # bounded: the stuck rank's sleep, then gone


@pytest.mark.slow
def test_groups_and_repeated_init_pass_on_cpu(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done, _ = runner(["--checks", "groups,repeated_init", "--report", str(path)], {})
    assert done.returncode == 0, done.stdout + done.stderr
    report = report_of(path)
    groups, repeated = check(report, "groups"), check(report, "repeated_init")
    assert groups["status"] == "passed", groups["reason"]
    assert [g["group"] for g in groups["figures"]["groups"]] == [1, 2, 3, 4]
    assert repeated["status"] == "passed", repeated["reason"]
    assert [c["cycle"] for c in repeated["figures"]["cycles"]] == [1, 2, 3, 4, 5]
    assert report["world_size"] == 2


@pytest.mark.slow
def test_a_group_a_rank_leaves_out_fails_naming_the_group(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    done, _ = runner(["--checks", "groups", "--timeout", "6", "--report", str(path)],
                     {"IMAGEBUILD_TEST_SKIP_GROUP": "1:2"})
    assert done.returncode == 1, done.stdout + done.stderr
    groups = check(report_of(path), "groups")
    assert groups["status"] == "failed"
    assert "rank 0: group 2 of 4: all-reduce did not complete within 3 s" in groups["reason"]


def test_slurm_placement_follows_the_block_layout() -> None:
    launch = Launch(0, 5, 0, "a", 1, "slurm")
    env = {"SLURM_STEP_NODELIST": "nid[001-002],x", "SLURM_STEP_TASKS_PER_NODE": "2(x2),1"}
    assert slurm_placement(launch, env) == {0: "nid001", 1: "nid001", 2: "nid002",
                                            3: "nid002", 4: "x"}
    # Not block, counts that do not add up, or not SLURM: unknown, not guessed.
    assert slurm_placement(launch, {**env, "SLURM_DISTRIBUTION": "cyclic"}) == {}
    assert slurm_placement(launch, {**env, "SLURM_STEP_TASKS_PER_NODE": "2"}) == {}
    assert slurm_placement(Launch(0, 5, 0, "a", 1, "torchrun"), env) == {}


def test_missing_hosts_are_those_no_rank_came_from() -> None:
    failure = RendezvousFailed("x", 4, {0: "nid001.cluster", 2: "nid002"},
                               {0: "nid001", 1: "nid001", 2: "nid002", 3: "nid003"})
    assert failure.missing == [1, 3]
    assert failure.missing_hosts == ["nid003"]  # rank 1's host sent rank 0
