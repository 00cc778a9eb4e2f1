"""Every doctor item, in the order a user fixes them: driver and GPUs first, then the
libraries, then the collectives' stack (RCCL against the kernel and runtime, the network
plugin's release, its tuner beside imagebuild's), then storage."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import (
    driver,
    gfx,
    libfabric,
    miopen,
    plugin_release,
    rccl_p2p,
    rocm_binds,
    smi,
    tuners,
    xnack,
)
from .finding import FAIL, PASS, SKIP, WARN, Finding, skipped
from .libfabric import FabricSettings
from .needs import ImageNeeds
from .node import Node
from .runtime import Runtime, in_container, named

ITEMS = ("driver", "gfx", "xnack", "libfabric", "rocm-binds", "smi", "rccl-p2p", "plugin",
         "tuners", "miopen")


@dataclass(frozen=True)
class DoctorSettings:
    #: Where the node's /sys and /proc (and, in the image, its files) are.
    root: Path = Path("/")
    #: The job's environment (HSA_XNACK, LD_LIBRARY_PATH, MIOPEN_*, NCCL_NET, HOME).
    env: dict[str, str] = field(default_factory=dict)
    #: True inside the image: the loader and mount table are the image's.
    in_image: bool = False
    fabric: FabricSettings = field(default_factory=FabricSettings)
    #: From the host: the binds the launch adds, and apptainer --rocm.
    binds: tuple[str, ...] = ()
    bind_host_rocm: bool = False
    #: Where the image's tree is in this mount namespace (a test's scratch tree).
    image_root: str = "/"
    #: The container runtime the job uses (runtime.RUNTIMES), from the host's launch or
    #: site; inside the image it is read from the container (None here).
    runtime: str | None = None
    #: What named the runtime (the launcher, --runtime, the site profile).
    runtime_from: str = ""


def job_runtime(settings: DoctorSettings) -> Runtime:
    if settings.runtime:
        return named(settings.runtime, settings.runtime_from or "the launch")
    if settings.in_image:
        return in_container(settings.root, settings.env)
    return Runtime(None, "no runtime named (doctor --runtime, or a site profile)")


def run_doctor(needs: ImageNeeds, settings: DoctorSettings,
               table: dict[str, Any] | None = None) -> list[Finding]:
    node = Node(settings.root)
    env = settings.env
    findings = [
        driver.check(node, needs, table if table is not None else driver.load_table()),
        gfx.check(node, needs),
        xnack.check(node, needs, env),
        libfabric.check(settings.root, needs, settings.fabric, env),
    ]
    if settings.in_image:
        findings += [rocm_binds.check_mounts(node, settings.image_root),
                     smi.check(settings.root, needs, env)]
    else:
        findings += [rocm_binds.check_launch(settings.binds, settings.bind_host_rocm),
                     skipped(smi.ITEM, "reads the image's libraries: the in-image part checks it")]
    exports = tuners.plugin_tuner(settings.root, needs, settings.in_image)
    findings += [
        rccl_p2p.check(node, needs, env, job_runtime(settings)),
        plugin_release.check(node, needs, env, tuners.uses_plugin_tuner(
            needs, env, exports, settings.in_image)),
        tuners.check(needs, env, exports, settings.in_image),
        miopen.check(node, env),
    ]
    return findings


MARKS = {PASS: "PASS", WARN: "WARN", FAIL: "FAIL", SKIP: "skip"}


def format_lines(findings: list[Finding]) -> list[str]:
    """One line per item (status, item, reason), the fix indented below warn and fail."""
    width = max(len(f.item) for f in findings) if findings else 0
    lines = []
    for finding in findings:
        lines.append(f"{MARKS[finding.status]}  {finding.item:<{width}}  {finding.reason}")
        if finding.fix:
            lines.append(f"{'':6}{'':<{width}}  fix: {finding.fix}")
    return lines
