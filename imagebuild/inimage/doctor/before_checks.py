"""The in-image runner's first step: the doctor's items before any check, so that a node
that does not fit the image (a driver too old for its ROCm, a GPU it has no code for)
stops a validation run with the reason and the fix, before the checks burn allocation.

It runs where ``imagebuild validate`` runs inside the image on a node's AMD GPUs
(``srun --environment=... imagebuild validate``, ``apptainer exec ... imagebuild
validate``). Not with --no-doctor or --cpu, not on a node without the amdgpu driver, not
in the ranks this runner spawned (their parent ran it), and not when the host command
launched the runner: host ``imagebuild validate`` runs the doctor itself (here, or as its
sbatch script's per-node step) and says so in the runner's environment (DOCTOR_DONE_ENV:
a variable, not a flag, so that images built before this step still run).
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..image_manifest import load_manifest
from ..result import CheckResult, failed
from .finding import FAIL, Finding, exit_code, report
from .libfabric import FabricSettings
from .needs import ImageNeeds, needs_beside
from .node import Node
from .run import DoctorSettings, format_lines, run_doctor

#: Where the node's /sys and /proc are read (default /): a copy of a node's, or a test's.
NODE_ROOT_ENV = "IMAGEBUILD_NODE_ROOT"
MANIFEST_ENV = "IMAGEBUILD_MANIFEST"
#: Set by host ``imagebuild validate`` where it ran the doctor itself, or declined it.
DOCTOR_DONE_ENV = "IMAGEBUILD_DOCTOR_DONE"
DEFAULT_MANIFEST = "opt/imagebuild/manifest.json"


def node_root(environ: Mapping[str, str] | None = None) -> Path:
    """Where this node's /sys, /proc and /dev are read: $IMAGEBUILD_NODE_ROOT, else /."""
    environ = os.environ if environ is None else environ
    return Path(environ.get(NODE_ROOT_ENV) or "/")


def in_image_settings(root: Path, env: Mapping[str, str]) -> DoctorSettings:
    """Inside the image: its loader finds the plugin's libfabric, its mount table shows
    the binds."""
    return DoctorSettings(root=root, env=dict(env), in_image=True,
                          fabric=FabricSettings(in_image=True))


@dataclass(frozen=True)
class Preflight:
    findings: tuple[Finding, ...]
    needs: ImageNeeds | None
    #: Why the doctor did not run, when it did not.
    skipped: str | None = None

    @property
    def stops(self) -> bool:
        return exit_code(list(self.findings)) != 0


def why_not(options: Any, environ: Mapping[str, str], node: Node) -> str | None:
    if not getattr(options, "doctor", True):
        return "--no-doctor"
    if options.cpu:
        return "--cpu: no GPU checks to protect"
    if environ.get(DOCTOR_DONE_ENV):
        return "the host command ran it (here, or as the job's per-node step) or was told not to"
    if environ.get("IMAGEBUILD_VALIDATE_LAUNCHER") == "spawn":
        return "a rank this runner started: the runner ran the doctor before starting it"
    if not node.amdgpu_loaded():
        return "no amdgpu driver on this node (the doctor's items are about AMD's stack)"
    return None


def preflight(options: Any, environ: Mapping[str, str]) -> Preflight:
    root = node_root(environ)
    reason = why_not(options, environ, Node(root))
    if reason:
        return Preflight((), None, reason)
    path = options.manifest or environ.get(MANIFEST_ENV) or str(root / DEFAULT_MANIFEST)
    manifest, why = load_manifest(path)
    if manifest is None:
        return Preflight((), None, why)
    needs = needs_beside(manifest, path)
    return Preflight(tuple(run_doctor(needs, in_image_settings(root, environ))), needs)


def stopped_result(result: Preflight) -> CheckResult:
    """The report's one entry when the doctor stops the run: the failed items, each with
    its reason and fix."""
    failures = [f for f in result.findings if f.status == FAIL]
    reason = "; ".join(f"{f.item}: {f.reason}" for f in failures)
    return failed("doctor", f"this node does not fit the image, no check ran: {reason}"[:600],
                  figures={"findings": [f.to_json() for f in result.findings]},
                  details=format_lines(list(result.findings)))


def doctor_first(options: Any, environ: Mapping[str, str], local_rank: int) -> Preflight:
    """Run the doctor and print its items (the node's first rank prints: every rank of a
    node sees the same node)."""
    result = preflight(options, environ)
    if result.skipped or local_rank != 0:
        return result
    assert result.needs is not None
    out = sys.stderr
    print(f"doctor: {result.needs.name} (ROCm {result.needs.rocm or 'none'}) on "
          f"{socket.gethostname()}", file=out)
    print("\n".join(format_lines(list(result.findings))), file=out, flush=True)
    if result.stops:
        print("validate stopped before the checks: this node does not fit the image (fix "
              "the failed items, or --no-doctor to run the checks anyway)", file=out,
              flush=True)
    return result


def stop(options: Any, result: Preflight, local_rank: int, world_size: int) -> int:
    """The run ends here, exit code 1. The first rank of the node writes the report (its
    one entry the doctor's, ``stopped_by: doctor``); the ranks of a node that fits wait at
    the rendezvous for this node's until --timeout."""
    from .. import CHECK_NAMES
    from ..options import selected_checks
    from ..run_report import (
        EVENT_PREFIX,
        build_report,
        default_report_destination,
        format_table,
        utc_now,
        write_report,
    )

    if local_rank != 0:
        return 1
    assert result.needs is not None
    host = socket.gethostname()
    started = utc_now()
    facts = {"host": host, "hosts": [host], "nodes": 1, "mode": "gpu",
             "world_size": world_size,
             "recipe": getattr(options, "recipe", None) or result.needs.name,
             "complete": False, "stopped_by": "doctor",
             "checks_pending": [n for n in selected_checks(options) if n in CHECK_NAMES],
             "doctor": report(list(result.findings), {"image": result.needs.name,
                                                      "rocm": result.needs.rocm,
                                                      "part": "image"})}
    document = build_report(results=[stopped_result(result)], started=started,
                            finished=utc_now(), run=facts, allow_cpu=options.allow_cpu)
    written = None
    if getattr(options, "report", None) != "-":
        destination = (Path(options.report) if getattr(options, "report", None)
                       else default_report_destination(host, started)[0])
        try:
            written = write_report(document, destination)
        except OSError as exc:
            print(f"error: cannot write report {destination}: {exc.strerror}", file=sys.stderr)
    if getattr(options, "events", False):
        event = {"event": "report", "report": document, "path": str(written) if written else None}
        sys.stdout.write(EVENT_PREFIX + json.dumps(event) + "\n")
        sys.stdout.flush()
    else:
        print(format_table(document))
        if written:
            print(f"report: {written}")
    return 1
