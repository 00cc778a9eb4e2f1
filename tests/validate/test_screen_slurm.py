"""``imagebuild screen`` on the real one-node SLURM cluster (.ci/setup-system.sh): from
outside an allocation (srun makes one), inside one (an sbatch job runs it), with node
trees carrying one planted fault each, and the failing list that ``srun --exclude``
takes. This machine's own locked-memory limit is 8 MiB (the CI container's, which even
root cannot raise): the default 32 GiB floor fails it, a real finding; the tests that
want a passing node lower the floor."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.screen_trees import FAULTS, healthy, plant
from tests.support.slurm import cluster_up
from tests.support.validate import run_imagebuild

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(autouse=True)
def _slurm() -> None:
    why = cluster_up()
    if why:
        pytest.skip(why)


def node_name() -> str:
    return subprocess.run(["sinfo", "--noheader", "--format=%n"], capture_output=True,
                          text=True, check=True, timeout=30).stdout.split()[0]


def test_the_real_node_passes_and_fails_on_its_real_memlock(tmp_path: Path) -> None:
    name = node_name()
    began = time.monotonic()
    done = run_imagebuild("screen", "--cpu", "--memlock-min-gib", "0", "--out",
                          str(tmp_path / "pass"), cwd=tmp_path)
    wall = time.monotonic() - began
    assert done.returncode == 0, done.stdout + done.stderr
    fleet = json.loads((tmp_path / "pass/screen.json").read_text())
    assert fleet["passing"] == [name] and fleet["launcher"] == "srun"
    print(f"screen of {name} through srun: {wall:.1f} s wall, node {fleet['per_node_s']}")
    done = run_imagebuild("screen", "--cpu", "--out", str(tmp_path / "fail"), cwd=tmp_path)
    assert done.returncode == 1
    fleet = json.loads((tmp_path / "fail/screen.json").read_text())
    [row] = fleet["nodes"]
    assert row["node"] == name and row["reasons"][0].startswith("memlock: RLIMIT_MEMLOCK is")
    # What srun --exclude takes: the file of names (a path holding "/"), or the one line.
    for exclude in (str(tmp_path / "fail/failing_nodes.txt"),
                    (tmp_path / "fail/exclude").read_text().strip()):
        excluded = subprocess.run(["srun", "-N1", "--immediate=5", f"--exclude={exclude}",
                                   "true"], capture_output=True, text=True, timeout=60,
                                  check=False)
        assert excluded.returncode != 0  # its only node excluded: nothing can run
        assert "Requested node configuration is not available" in excluded.stderr
    nothing = (tmp_path / "pass/exclude").read_text().strip()
    allowed = subprocess.run(["srun", "-N1", f"--exclude={nothing}", "true"],
                             capture_output=True, text=True, timeout=60, check=False)
    assert nothing == "" and allowed.returncode == 0, allowed.stderr


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_planted_fault_is_named_and_excluded_through_srun(tmp_path: Path,
                                                                fault: str) -> None:
    root = healthy(tmp_path)
    plant(root, fault)
    done = run_imagebuild("screen", "--cpu", "--root", str(root), "--out", str(tmp_path / "o"),
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    fleet = json.loads((tmp_path / "o/screen.json").read_text())
    [row] = fleet["nodes"]
    assert row["node"] == node_name()  # SLURM's name for it, not the tree's
    assert [r.split(":")[0] for r in row["reasons"]] == [FAULTS[fault]]
    assert (tmp_path / "o/failing_nodes.txt").read_text() == f"{row['node']}\n"


def test_inside_an_allocation_it_screens_the_allocations_nodes(tmp_path: Path) -> None:
    import sys

    script = tmp_path / "screen.sbatch"
    script.write_text("#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --time=00:05:00\n"
                      f"#SBATCH --output={tmp_path}/job-%j.out\nset -e\n"
                      f"{sys.executable} -m imagebuild screen --cpu --memlock-min-gib 0 "
                      f"--out {tmp_path}/in\n")
    job = subprocess.run(["sbatch", "--wait", "--parsable", str(script)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300, check=False)
    logs = "\n".join(p.read_text() for p in tmp_path.glob("job-*.out"))
    assert job.returncode == 0, job.stderr + logs
    fleet = json.loads((tmp_path / "in/screen.json").read_text())
    assert fleet["passing"] == [node_name()] and fleet["failing"] == []
    assert "--nodes=1" in fleet["command"] and not any(w.startswith("--time") for w in
                                                       fleet["command"])
