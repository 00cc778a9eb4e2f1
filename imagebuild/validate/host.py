"""Host side of ``imagebuild validate``: run the in-image checks somewhere, collect the report.

Where the checks run (one module each):
- ``local``: this Python environment (launch_local);
- ``docker``, ``podman``: the container engine (launch_container; imagebuild.engine opens
  it: docker through its SDK, podman through its CLI);
- ``apptainer`` (or ``singularity``), ``enroot``: their CLIs (launch_apptainer,
  launch_enroot);
- ``sbatch``: writes a batch script for a multi-node run and returns its path
  (launch_sbatch).

All of them run the same runner with ``--events --report -`` (events.EventStream reads
what comes back) from the same ``Invocation`` (invocation: command line, environment,
mounts). This module picks the launcher, runs it and writes the report file.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.engine.base import Engine
from imagebuild.engine.select import docker_reachable, open_engine
from imagebuild.errors import ValidateError
from imagebuild.inimage.run_report import default_report_path, utc_now
from imagebuild.validate.events import EventCallback, EventStream, LineCallback, stream_command
from imagebuild.validate.invocation import Invocation
from imagebuild.validate.launch_apptainer import apptainer_argv
from imagebuild.validate.launch_container import run_in_engine
from imagebuild.validate.launch_enroot import run_enroot
from imagebuild.validate.launch_local import run_local
from imagebuild.validate.launch_sbatch import SbatchSpec, write_sbatch
from imagebuild.validate.target import Target

LAUNCHERS = ("auto", "local", "docker", "podman", "apptainer", "enroot", "sbatch")
GPU_KINDS = ("auto", "rocm", "nvidia", "none")


@dataclass(frozen=True)
class Outcome:
    report: dict[str, Any] | None
    exit_code: int
    report_path: Path | None = None
    script_path: Path | None = None
    output_tail: tuple[str, ...] = ()


def choose_launcher(target: Target, requested: str, which: Callable[[str], str | None],
                    docker_answers: Callable[[], bool] = docker_reachable) -> str:
    """The launcher for ``target``: ``requested``, or with ``auto`` what the target's kind
    and this host offer (an image: a reachable Docker engine, else podman)."""
    if requested != "auto":
        return requested
    if target.kind == "environment":
        return "local"
    if target.kind == "sif":
        if which("apptainer") or which("singularity"):
            return "apptainer"
        raise ValidateError(f"{target.ref}: a .sif needs apptainer (or singularity) on PATH")
    if target.kind == "sqsh":
        if which("enroot"):
            return "enroot"
        raise ValidateError(f"{target.ref}: a squashfs image needs enroot on PATH")
    if docker_answers():
        return "docker"
    if which("podman"):
        return "podman"
    raise ValidateError(f"cannot run image {target.ref}: no reachable docker engine and no "
                        "podman; pass --launcher")


def unused_script_path(directory: Path) -> Path:
    """``imagebuild-validate-<UTC time>.sbatch``, with -2, -3, ... when a script of the same
    second is there already (two jobs prepared in one second must not share a script)."""
    stem = f"imagebuild-validate-{utc_now().strftime('%Y%m%dT%H%M%SZ')}"
    for n in itertools.count(1):
        path = directory / (f"{stem}.sbatch" if n == 1 else f"{stem}-{n}.sbatch")
        if not path.exists() and not path.with_suffix(".checks").exists():
            return path
    raise AssertionError("unreachable")


def validate(target: Target, invocation: Invocation, *, report_path: Path | None,
             on_event: EventCallback | None = None, on_line: LineCallback | None = None,
             sbatch: SbatchSpec | None = None, script_dir: Path = Path("."),
             engine: Engine | None = None, runner: Any = None) -> Outcome:
    """Run the checks as ``invocation`` says and write the report; never prints.

    ``engine``: the container engine for the docker and podman launchers (default: the one
    the launcher names, opened by imagebuild.engine.select)."""
    if invocation.launcher == "sbatch":
        path = write_sbatch(target, invocation, sbatch or SbatchSpec(),
                            unused_script_path(script_dir))
        return Outcome(None, 0, script_path=path)
    stream = EventStream(on_event, on_line)
    launcher = invocation.launcher
    if launcher == "local":
        code = run_local(invocation, stream, runner)
    elif launcher in ("docker", "podman"):
        engine = engine or open_engine(launcher, for_build=False, runner=runner)
        code = run_in_engine(engine, target, invocation, stream)
    elif launcher == "apptainer":
        code = stream_command(apptainer_argv(target, invocation), stream, None, runner)
    elif launcher == "enroot":
        code = run_enroot(target, invocation, stream, runner)
    else:
        raise ValidateError(f"unknown launcher {launcher!r}; choose from {', '.join(LAUNCHERS)}")
    stream.close()
    report = stream.report
    if report is None:
        detail = "\n".join(stream.tail[-15:])
        raise ValidateError(f"the checks ended (exit {code}) without a report; last output:\n"
                            f"{detail}" if detail else
                            f"the checks ended (exit {code}) without a report and no output")
    report["runtime"] = launcher
    if target.ref and not report.get("image"):
        report["image"] = target.ref
    if target.recipe and not report.get("recipe"):
        report["recipe"] = target.recipe
    path = report_path or default_report_path(report.get("host") or socket.gethostname(),
                                              utc_now())
    write_json(report, path)
    return Outcome(report, code, report_path=path, output_tail=tuple(stream.tail))


def write_json(data: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)
