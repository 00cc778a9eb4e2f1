"""``imagebuild validate --local --launcher sbatch`` on a real SLURM cluster: the generated
script is submitted with ``sbatch --wait`` and the report its job leaves is checked.

The one-node cluster comes from .ci/setup-system.sh (slurmctld, slurmd, munge; CPU binding
through task/affinity). The job runs the CPU suite with two ranks over gloo in this
Python environment; the report must show both ranks, gloo collectives over world size
two, and each rank bound to its own cores rather than the whole node.

The launch values come from a site profile (``--site``, a project's sites/ci-node.yaml):
its SLURM binding, container environment and expected libfabric provider must reach the
script and, through it, the checks; one explicit flag (``--socket-ifname lo``) must win
over the profile's interface, which does not exist here (gloo would fail on it).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from imagebuild.inimage.checks.devices import parse_cpulist
from tests.support.slurm import cluster_up
from tests.support.validate import assert_cpu_mode_report, check, run_imagebuild

pytestmark = [pytest.mark.integration, pytest.mark.slow]


SITE = """\
name: ci-node
network:
  socket_ifname: "hsn0"   # not on this machine: the explicit --socket-ifname lo must win
  provider: cxi
slurm:
  cpus_per_task: 1
  cpu_bind: cores
container:
  env:
    CXI_FORK_SAFE: "1"
    NCCL_NET_GDR_LEVEL: "3"
"""


def test_sbatch_job_runs_the_cpu_suite_on_two_bound_ranks(tmp_path: Path) -> None:
    why = cluster_up()
    if why:
        pytest.skip(why)
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "ci-node.yaml").write_text(SITE)
    report_path = tmp_path / "report.json"
    generated = run_imagebuild(
        "validate", "--local", "--launcher", "sbatch", "--gpus", "none", "--nodes", "1",
        "--site", "ci-node", "--socket-ifname", "lo", "--time", "00:10:00", "--allow-cpu",
        "--report", str(report_path), cwd=tmp_path, env={"IMAGEBUILD_PROJECT": str(tmp_path)})
    assert generated.returncode == 0, generated.stdout + generated.stderr
    [script] = tmp_path.glob("imagebuild-validate-*.sbatch")
    text = script.read_text()
    # The site's values in the script: binding, environment, what the checks expect.
    assert "--cpus-per-task=1 --cpu-bind=verbose,cores" in text
    assert 'export CXI_FORK_SAFE="1"' in text and 'export NCCL_NET_GDR_LEVEL="3"' in text
    assert "export NCCL_SOCKET_IFNAME=lo" in text and "hsn0" not in text
    assert "--expect-net-provider cxi" in text and "--expect-binding" in text

    started = time.monotonic()
    job = subprocess.run(["sbatch", "--wait", "--parsable", script.name], cwd=tmp_path,
                         capture_output=True, text=True, timeout=900, check=False)
    seconds = time.monotonic() - started
    job_id = job.stdout.strip().split(";")[0]
    output = tmp_path / f"imagebuild-validate-{job_id}.out"
    log = output.read_text() if output.exists() else "(no job output)"
    assert job.returncode == 0, f"sbatch --wait exit {job.returncode}: {job.stderr}\n{log}"
    print(f"job {job_id}: sbatch --wait took {seconds:.1f} s")

    report = json.loads(report_path.read_text())
    assert_cpu_mode_report(report, world_size=2)
    assert report["launcher"] == "slurm" and report["summary"]["exit_code"] == 0
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert [r["local_rank"] for r in report["ranks"]] == [0, 1]
    collectives = check(report, "collectives")
    assert collectives["figures"]["backend"] == "gloo"
    assert collectives["figures"]["world_size"] == 2
    # The checks ran with the site's environment and judged against its expectations.
    network = check(report, "network")["figures"]
    assert network["expected_provider"] == "cxi"
    assert network["env"]["CXI_FORK_SAFE"] == "1" and network["env"]["NCCL_NET_GDR_LEVEL"] == "3"
    assert network["env"]["GLOO_SOCKET_IFNAME"] == "lo"

    # Each rank's CPU set as the rank saw it (sched_getaffinity): one core each, two
    # different cores, and not every CPU of the node.
    node_cpus = len(os.sched_getaffinity(0))
    per_rank = check(report, "devices")["figures"]["per_rank"]
    affinities = [parse_cpulist(r["cpu_affinity"]) for r in per_rank]
    assert all(r["binding_expected"] == "--expect-binding" for r in per_rank), per_rank
    assert [len(a) for a in affinities] == [1, 1], per_rank
    assert not affinities[0] & affinities[1], per_rank
    if node_cpus > 1:
        assert all(len(a) < node_cpus for a in affinities)
    # srun's own account of the binding (--cpu-bind=verbose) in the job's output.
    assert log.count("cpu-bind=MASK") == 2, log


def _screened_job(tmp_path: Path, screen_args: str, env: dict[str, str] | None = None
                  ) -> tuple[subprocess.CompletedProcess[str], str, Path]:
    report_path = tmp_path / "report.json"
    generated = run_imagebuild(
        "validate", "--local", "--launcher", "sbatch", "--gpus", "none", "--nodes", "1",
        "--socket-ifname", "lo", "--time", "00:10:00", "--allow-cpu", "--checks",
        "environment,collectives", "--screen", "--screen-args", screen_args,
        "--report", str(report_path), cwd=tmp_path)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    [script] = tmp_path.glob("imagebuild-validate-*.sbatch")
    lint = subprocess.run(["shellcheck", str(script)], capture_output=True, text=True,
                          check=False)
    assert lint.returncode == 0, lint.stdout
    job = subprocess.run(["sbatch", "--wait", "--parsable", script.name], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600, check=False,
                         env={**os.environ, **(env or {})})
    job_id = job.stdout.strip().split(";")[0]
    output = tmp_path / f"imagebuild-validate-{job_id}.out"
    return job, output.read_text() if output.exists() else "(no job output)", report_path


def test_a_screened_job_runs_the_checks_on_the_nodes_that_pass(tmp_path: Path) -> None:
    why = cluster_up()
    if why:
        pytest.skip(why)
    job, log, report_path = _screened_job(tmp_path, "--memlock-min-gib 0")
    assert job.returncode == 0, log
    assert "imagebuild screen: 1 node(s) passed" in log
    report = json.loads(report_path.read_text())
    assert report["summary"]["exit_code"] == 0 and report["world_size"] == 2
    assert report["screen"]["excluded"] == [] and len(report["screen"]["passed"]) == 1


def test_a_job_whose_nodes_all_fail_the_screen_ends_before_the_checks(tmp_path: Path) -> None:
    """This node's real 8 MiB locked-memory limit fails the default floor; a node tree with
    a GPU error in its kernel log fails it too: excluded, named, no checks run."""
    why = cluster_up()
    if why:
        pytest.skip(why)
    from tests.support.screen_trees import healthy, plant

    job, log, report_path = _screened_job(tmp_path, "")
    assert job.returncode != 0 and "imagebuild screen: no node passed" in log, log
    [verdict] = (tmp_path / "report.screen").glob("*.json")
    assert json.loads(verdict.read_text())["reasons"][0].startswith("memlock:")
    assert (tmp_path / "report.screen/exclude").read_text().strip() == verdict.stem
    assert not report_path.exists()

    root = healthy(tmp_path / "tree")
    plant(root, "kernel-log")
    for old in tmp_path.glob("imagebuild-validate-*"):
        if old.is_file():
            old.unlink()
    job, log, _ = _screened_job(tmp_path, "--memlock-min-gib 0",
                                env={"IMAGEBUILD_NODE_ROOT": str(root)})
    assert job.returncode != 0, log
    [verdict] = (tmp_path / "report.screen").glob("*.json")
    assert json.loads(verdict.read_text())["reasons"][0].startswith("kernel-log: 1 GPU error")
