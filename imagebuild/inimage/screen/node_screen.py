"""One node's screen: every item, the GPU probes in parallel, and the node's verdict.

Order, so the node's wall time is about one GPU probe's: the processes already holding a
GPU are listed first (the probes about to start would hold one too), then the probes
start, one process per GPU, and while they run the host items are read and the SMI tool
is timed; the probes are collected last, each killed at its deadline. The node FAILs
when an item fails (a warning does not fail it), with every failing item's reason.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..doctor.finding import FAIL, Finding, failed, passed, skipped
from ..doctor.node import Node
from . import gpu_probe, gpu_processes, kernel_log, limits, links, smi_latency
from .node_facts import fingerprint_keys, node_facts

SCHEMA = "imagebuild-screen-node/1"
#: Lines of the host's stream (srun gathers every node's stdout) start with this.
LINE_PREFIX = "@@imagebuild-screen "
PER_GPU_TIMEOUT_S = 15.0
_VISIBLE = ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
MANIFEST = "opt/imagebuild/manifest.json"


@dataclass(frozen=True)
class ScreenSettings:
    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=dict)
    cpu: bool = False
    per_gpu_timeout_s: float = PER_GPU_TIMEOUT_S
    memlock_min_gib: float = limits.MEMLOCK_MIN_GIB
    shm_min_gib: float = limits.SHM_MIN_GIB
    smi_timeout_s: float = smi_latency.TIMEOUT_S
    allowed_procs: tuple[str, ...] = gpu_processes.ALLOWED
    fail_on_procs: bool = True
    kernel_log_minutes: float | None = None
    expect_links: int | None = None
    #: An image manifest named on the command line (the doctor then reads the node as
    #: the host sees it); None: the image's own, under the root, when there is one.
    manifest: str | None = None


def gpu_indices(node: Node, env: Mapping[str, str]) -> list[int]:
    """The GPUs this process may use, counted without touching the driver (a wedged one
    would hang the screen itself): the visibility variable, else the KFD topology, else
    /dev/nvidia<N>."""
    for name in _VISIBLE:
        value = env.get(name)
        if value is not None:
            return list(range(len([v for v in value.split(",") if v.strip()])))
    amd = node.gpus()
    if amd:
        return list(range(len(amd)))
    dev = node.path("/dev")
    nvidia = [p for p in dev.iterdir() if re.fullmatch(r"nvidia\d+", p.name)] \
        if dev.is_dir() else []
    return list(range(len(nvidia)))


def doctor_findings(settings: ScreenSettings) -> list[Finding]:
    """The doctor's items where the image's needs are known, else one skipped line."""
    from ..doctor.before_checks import in_image_settings
    from ..doctor.needs import needs_beside
    from ..doctor.run import DoctorSettings, run_doctor
    from ..image_manifest import load_manifest

    path = settings.manifest or str(settings.root / MANIFEST)
    manifest, why = load_manifest(path)
    if manifest is None:
        return [skipped("doctor", f"not run: {why}")]
    env = dict(settings.env)
    doctor = (DoctorSettings(root=settings.root, env=env) if settings.manifest
              else in_image_settings(settings.root, env))
    return run_doctor(needs_beside(manifest, path), doctor)


def _probe_findings(results: list[gpu_probe.ProbeResult], cpu: bool) -> list[Finding]:
    if not results:
        return [skipped("gpu", "no GPU on this node (--cpu runs the probe on the CPU, as a "
                        "proxy)")]
    bad = [r for r in results if not r.ok]
    slowest = max(r.seconds for r in results)
    what = "CPU proxy (no GPU probed)" if cpu else f"{len(results)} GPU(s)"
    if bad:
        return [failed("gpu", "; ".join(r.reason for r in bad),
                       "drain the node and have the GPU checked")]
    return [passed("gpu", f"{what}: bind, 256 MB, 2048x2048 bf16 GEMM finite "
                   f"(slowest {slowest:.1f} s)")]


def screen_node(settings: ScreenSettings) -> dict[str, Any]:
    began = time.monotonic()
    started = _dt.datetime.now(_dt.timezone.utc)  # noqa: UP017 - runs on Python 3.10
    node = Node(settings.root)
    env = settings.env
    findings = [gpu_processes.check(node, settings.allowed_procs, settings.fail_on_procs)]
    indices = [0] if settings.cpu else gpu_indices(node, env)
    probes_began = time.monotonic()
    running = [(i, gpu_probe.start(i, settings.cpu)) for i in indices]
    deadline = probes_began + settings.per_gpu_timeout_s
    findings += [limits.check_memlock(node, settings.memlock_min_gib),
                 limits.check_shm(node, settings.shm_min_gib),
                 kernel_log.check(node, settings.kernel_log_minutes),
                 links.check(node, settings.expect_links)]
    findings += doctor_findings(settings)
    findings.append(smi_latency.check(env, settings.smi_timeout_s))
    results = [gpu_probe.collect(i if not settings.cpu else -1, p, deadline, probes_began)
               for i, p in running]
    findings += _probe_findings(results, settings.cpu)
    facts = node_facts(settings.root, env)
    failing = [f for f in findings if f.status == FAIL]
    return {"schema": SCHEMA, "node": facts["name"],
            "verdict": "FAIL" if failing else "PASS",
            "reasons": [f"{f.item}: {f.reason}" for f in failing],
            "started": started.isoformat(timespec="seconds"),
            "duration_s": round(time.monotonic() - began, 2),
            "cpu_proxy": settings.cpu,
            "findings": [f.to_json() for f in findings],
            "gpus": [{"index": r.index, "ok": r.ok, "reason": r.reason,
                      "seconds": round(r.seconds, 2), **r.figures} for r in results],
            "facts": facts, "fingerprint": fingerprint_keys(facts),
            "job_nodes": env.get("SLURM_JOB_NODELIST")}


def write_outputs(report: dict[str, Any], directory: Path) -> Path:
    """``<node>.json`` and ``<node>.verdict`` (one word, PASS or FAIL: a batch script
    reads it without Python) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{report['node']}.json"
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    partial.replace(path)
    (directory / f"{report['node']}.verdict").write_text(report["verdict"] + "\n")
    return path
