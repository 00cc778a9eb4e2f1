"""How ``imagebuild screen`` reaches the nodes: one task per node through srun (inside an
allocation: its nodes; from a login node: srun makes the allocation), or this node alone.

Every node runs ``python -m <checks package> screen`` (imagebuild.inimage.screen) in the
environment the job will run in: this Python environment (the checkout's package on a
file system the nodes share, as for ``validate --launcher sbatch``), a Container Engine
environment (``srun --environment=EDF``, the image's own package) or a .sif through
apptainer. Each prints its report as one line on stdout, which srun gathers; the nodes'
item lines (stderr) go to ``srun.log`` in the output directory. The whole step is bounded:
srun is stopped at the deadline and a node that did not report by then FAILs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.job_rank import expand_nodelist
from imagebuild.inimage.screen.node_screen import LINE_PREFIX
from imagebuild.validate.launch_apptainer import apptainer_binary, apptainer_gpu_flags
from imagebuild.validate.stage_checks import IMAGE_LIB, IMAGE_PACKAGE


@dataclass(frozen=True)
class ScreenLaunch:
    launcher: str  # "srun" or "local"
    node_args: tuple[str, ...]  # the node screen's flags
    environment: str | None = None  # Container Engine EDF
    sif: str | None = None
    python: str | None = None
    nodes: int | None = None
    nodelist: str | None = None
    partition: str | None = None
    account: str | None = None
    time: str = "00:05:00"
    gpus_per_node: int | None = None
    deadline_s: float = 120.0
    #: Extra environment for the node screens (a test's node tree, the site's variables).
    env: tuple[tuple[str, str], ...] = ()


def node_command(launch: ScreenLaunch) -> list[str]:
    """The command each node runs (srun's words come before it)."""
    if launch.sif:
        return [apptainer_binary(), "exec", *apptainer_gpu_flags("rocm", False),
                "--env", f"PYTHONPATH={IMAGE_LIB}", launch.sif,
                launch.python or "python3", "-m", IMAGE_PACKAGE, "screen", *launch.node_args]
    if launch.environment:
        return [launch.python or "python3", "-m", IMAGE_PACKAGE, "screen", *launch.node_args]
    return [launch.python or sys.executable, "-m", "imagebuild.inimage", "screen",
            *launch.node_args]


def in_allocation(environ: dict[str, str]) -> bool:
    return bool(environ.get("SLURM_JOB_ID"))


def srun_command(launch: ScreenLaunch, environ: dict[str, str]) -> list[str]:
    words = ["srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0",
             # the GPU probes are one process per GPU: not bound to the step's one core
             "--cpu-bind=none"]
    inside = in_allocation(environ)
    if launch.nodes:
        words.append(f"--nodes={launch.nodes}")
    elif inside:
        words.append(f"--nodes={environ.get('SLURM_JOB_NUM_NODES') or environ.get('SLURM_NNODES') or 1}")
    if launch.nodelist:
        words.append(f"--nodelist={launch.nodelist}")
    if not inside:
        words.append(f"--time={launch.time}")
        if launch.partition:
            words.append(f"--partition={launch.partition}")
        if launch.account:
            words.append(f"--account={launch.account}")
    if launch.gpus_per_node:
        words.append(f"--gpus-per-node={launch.gpus_per_node}")
    if launch.environment:
        words.append(f"--environment={launch.environment}")
    return words + node_command(launch)


def expected_nodes(launch: ScreenLaunch, environ: dict[str, str]) -> list[str]:
    """The nodes that must report: the --nodelist, else the allocation's (empty: srun
    makes the allocation, and the nodes say which they are)."""
    listed = launch.nodelist or (environ.get("SLURM_JOB_NODELIST")
                                 if in_allocation(environ) and not launch.nodes else None)
    return expand_nodelist(listed) if listed else []


@dataclass
class Collected:
    reports: list[dict[str, Any]]
    exit_code: int | None
    timed_out: bool
    command: list[str]
    log: Path


def _stop(proc: subprocess.Popen) -> None:
    """srun cancels its step on SIGTERM (and on a second SIGINT); then kill."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def run(launch: ScreenLaunch, out_dir: Path, environ: dict[str, str]) -> Collected:
    """Run the node screens; the report lines they printed, whatever happened."""
    command = srun_command(launch, environ) if launch.launcher == "srun" \
        else node_command(launch)
    env = {**environ, **dict(launch.env)}
    if launch.environment:
        env["PYTHONPATH"] = IMAGE_LIB
    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / ("srun.log" if launch.launcher == "srun" else "screen.log")
    reports: list[dict[str, Any]] = []
    with open(log, "w") as errors:
        try:
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors, text=True,
                                    env=env, start_new_session=True)
        except FileNotFoundError as exc:
            raise ValidateError(f"screen: cannot run {command[0]}: {exc.strerror}",
                                hint="imagebuild screen runs through srun (SLURM) or "
                                     "--local on this node") from exc

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith(LINE_PREFIX):
                    try:
                        reports.append(json.loads(line[len(LINE_PREFIX):]))
                    except ValueError:
                        continue

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            proc.wait(timeout=launch.deadline_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _stop(proc)
            timed_out = True
        except KeyboardInterrupt:
            _stop(proc)
            raise
        reader.join(timeout=5)
    return Collected(reports, proc.returncode, timed_out, command, log)


def log_tail(path: Path, lines: int = 15) -> Sequence[str]:
    try:
        return path.read_text(errors="replace").strip().splitlines()[-lines:]
    except OSError:
        return []
