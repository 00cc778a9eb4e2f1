"""gpu-processes: processes that already hold a GPU when the job is about to start.

A leaked rank of the previous job (still holding HBM) or another user's process is the
most common cause of a training job failing to start on a healthy-looking node (AMD
Primus's node_smoke fails the node for it). Two views, both readable without root:
- AMD: the KFD lists every process that opened /dev/kfd under
  /sys/class/kfd/kfd/proc/<pid> (drivers/gpu/drm/amd/amdkfd/kfd_process.c, what
  ``rocm-smi --showpids`` reads);
- any vendor: /proc/<pid>/fd links to /dev/kfd or /dev/nvidia<N> (all processes as root,
  this user's otherwise: a leaked rank of one's own previous job shows either way).
The screen itself, its parent and the site's monitoring agents (by name) do not count.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..doctor.finding import Finding, failed, passed, warned
from ..doctor.node import Node

ITEM = "gpu-processes"
#: node_smoke's default allow-list: AMD's and NVIDIA's monitoring agents.
ALLOWED = ("gpuagent", "rocm-smi-daemon", "amd-smi", "dcgm-exporter")
_DEVICE = re.compile(r"^/dev/(?:kfd|nvidia\d+)$")


def _name(node: Node, pid: int) -> str:
    text = node.read(f"/proc/{pid}/comm")
    return text.strip() if text else "N/A"


def _uid(node: Node, pid: int) -> str | None:
    for line in (node.read(f"/proc/{pid}/status") or "").splitlines():
        if line.startswith("Uid:"):
            return line.split()[1]
    return None


def holders(node: Node) -> dict[int, str]:
    """pid -> how it was seen holding a GPU."""
    found: dict[int, str] = {}
    kfd = node.path("/sys/class/kfd/kfd/proc")
    if kfd.is_dir():
        for entry in kfd.iterdir():
            if entry.name.isdigit():
                found[int(entry.name)] = "KFD process"
    proc = node.path("/proc")
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) in found:
            continue
        try:
            links = list((entry / "fd").iterdir())
        except OSError:  # another user's process, or gone
            continue
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if _DEVICE.match(target):
                found[int(entry.name)] = f"has {target} open"
                break
    return found


def check(node: Node, allowed: tuple[str, ...] = ALLOWED, fail: bool = True) -> Finding:
    own = {os.getpid(), os.getppid()} if node.root == Path("/") else set()
    foreign = []
    for pid, how in sorted(holders(node).items()):
        name = _name(node, pid)
        if pid in own or name in allowed:
            continue
        uid = _uid(node, pid)
        foreign.append(f"pid {pid} {name}" + (f" (uid {uid})" if uid else "") + f": {how}")
    if not foreign:
        return passed(ITEM, "no other process holds a GPU")
    reason = f"{len(foreign)} process(es) already hold a GPU: " + "; ".join(foreign[:6])
    fix = ("end them (a previous job's leaked ranks), or name a site's monitoring agent "
           "with --allow-procs")
    if not fail:
        return warned(ITEM, reason + " (--allow-foreign-procs)", fix)
    return failed(ITEM, reason, fix)
