"""The fleet's screen: every node's report joined, failing nodes named and listed for
``--exclude``, a node that never reported failed, fingerprint drift named. The node
screens are the real command on node trees (one healthy, one per planted fault), each a
"node" of its own name."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema

from imagebuild.inimage.screen.node_screen import LINE_PREFIX
from imagebuild.validate import fleet_screen
from tests.support.screen_trees import FAULTS, healthy, plant, write
from tests.support.validate import run_imagebuild

REPO = Path(__file__).resolve().parents[2]


def node_report(root: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env.update(PYTHONPATH=str(REPO), PATH="/usr/bin:/bin")
    done = subprocess.run([sys.executable, "-m", "imagebuild.inimage", "screen", "--cpu",
                           "--root", str(root)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith(LINE_PREFIX))
    return json.loads(line[len(LINE_PREFIX):])


def test_a_fleet_with_planted_faults(tmp_path: Path) -> None:
    roots = [healthy(tmp_path, "nid001"), healthy(tmp_path, "nid002")]
    for index, fault in enumerate(sorted(FAULTS), start=3):
        root = healthy(tmp_path, f"nid{index:03d}")
        plant(root, fault)
        roots.append(root)
    write(roots[1], "proc/sys/kernel/osrelease", "5.14.0-old\n")  # one node on another kernel
    reports = [node_report(r) for r in roots]
    expected = [f"nid{i:03d}" for i in range(1, len(roots) + 2)]  # one more never reports
    fleet = fleet_screen.aggregate(reports, expected, "srun ended first",
                                   _dt.datetime.now(_dt.UTC), 9.0, {"launcher": "test"})
    by_node = {row["node"]: row for row in fleet["nodes"]}
    assert fleet["passing"] == ["nid001", "nid002"]
    for index, fault in enumerate(sorted(FAULTS), start=3):
        row = by_node[f"nid{index:03d}"]
        assert row["verdict"] == "FAIL" and row["reasons"][0].startswith(FAULTS[fault]), row
    missing = expected[-1]
    assert by_node[missing]["reasons"] == ["no report: srun ended first"]
    assert fleet["failing"] == expected[2:] and fleet["exclude"] == ",".join(expected[2:])
    assert [(d["node"], d["key"], d["value"]) for d in fleet["drift"]] == [
        ("nid002", "kernel", "5.14.0-old")]
    path = fleet_screen.write(fleet, tmp_path / "out")
    assert (tmp_path / "out/failing_nodes.txt").read_text().split() == expected[2:]
    assert (tmp_path / "out/passing_nodes.txt").read_text().split() == ["nid001", "nid002"]
    assert (tmp_path / "out/exclude").read_text() == ",".join(expected[2:]) + "\n"
    summary = json.loads(path.read_text())
    schema = json.loads((REPO / "imagebuild/data/screen-report.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(summary)
    assert json.loads((tmp_path / "out/nodes/nid003.json").read_text())["verdict"] == "FAIL"


def test_two_nodes_that_disagree_have_no_majority_to_drift_from() -> None:
    reports = [{"node": "a", "fingerprint": {"kernel": "1"}},
               {"node": "b", "fingerprint": {"kernel": "2"}}]
    assert fleet_screen.drift(reports) == []


def test_the_command_on_this_node_writes_the_lists(tmp_path: Path) -> None:
    root = healthy(tmp_path, "nid042")
    plant(root, "small-shm")
    done = run_imagebuild("screen", "--local", "--cpu", "--root", str(root), "--out",
                          str(tmp_path / "out"), cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  nid042" in done.stdout and "shm: /dev/shm is 64 MiB" in done.stdout
    assert (tmp_path / "out/failing_nodes.txt").read_text() == "nid042\n"
    assert "PASS  shm" not in (tmp_path / "out/screen.log").read_text()


def test_validate_screens_this_node_first(tmp_path: Path) -> None:
    """--screen on this node: a node tree with a process on a GPU fails the screen and
    stops the run before the checks; this machine itself, with the locked-memory floor
    lowered below its 8 MiB, passes and the checks run."""
    root = healthy(tmp_path, "nid007")
    plant(root, "foreign-process")
    done = run_imagebuild("validate", "--local", "--cpu", "--allow-cpu", "--screen",
                          "--checks", "environment", "--report", str(tmp_path / "r.json"),
                          cwd=tmp_path, env={"IMAGEBUILD_NODE_ROOT": str(root)})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "this node failed its screen" in done.stderr
    assert "FAIL  gpu-processes" in done.stderr and not (tmp_path / "r.json").exists()
    done = run_imagebuild("validate", "--local", "--cpu", "--allow-cpu", "--screen",
                          "--screen-args", "--memlock-min-gib 0", "--checks", "environment",
                          "--report", str(tmp_path / "r.json"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "r.json").exists()
