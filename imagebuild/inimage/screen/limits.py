"""memlock and shm: the host limits a training job needs before it starts.

- RLIMIT_MEMLOCK (the soft "Max locked memory" of /proc/self/limits, which srun hands
  its tasks): RDMA registers (pins) its buffers; with a small limit registration fails
  under load. AMD Primus's node_smoke fails a node below 32 GiB (--ulimit-l-min-gb).
- /dev/shm: RCCL/NCCL's shared-memory transport and the data loaders' workers allocate
  there; a container's default 64 MiB fails them. node_smoke fails a node below 8 GiB
  (--shm-min-gb). On the live system the size is statvfs(/dev/shm); in a node tree it is
  the tmpfs ``size=`` option of /proc/mounts (tmpfs defaults to half of RAM without one:
  https://www.kernel.org/doc/html/latest/filesystems/tmpfs.html).

Floors: https://rocm.docs.amd.com/projects/primus/en/latest/02-user-guide/node-smoke-test-instruction.html
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..doctor.finding import Finding, failed, passed, skipped, warned
from ..doctor.node import Node

GIB = 2**30
MEMLOCK_MIN_GIB = 32.0
SHM_MIN_GIB = 8.0
_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}


def _human(value: float) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def memlock_limit(node: Node) -> float | None:
    """The soft locked-memory limit in bytes (inf: unlimited; None: not readable)."""
    for line in (node.read("/proc/self/limits") or "").splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory"):].split()[0]
            if soft == "unlimited":
                return float("inf")
            return float(soft) if soft.isdigit() else None
    return None


def check_memlock(node: Node, minimum_gib: float = MEMLOCK_MIN_GIB) -> Finding:
    item = "memlock"
    if minimum_gib <= 0:
        return skipped(item, "disabled (--memlock-min-gib 0)")
    limit = memlock_limit(node)
    if limit is None:
        return warned(item, "no 'Max locked memory' in /proc/self/limits", "run the screen on "
                      "the compute node, as the job's tasks run")
    if limit == float("inf"):
        return passed(item, "RLIMIT_MEMLOCK unlimited")
    if limit < minimum_gib * GIB:
        return failed(item, f"RLIMIT_MEMLOCK is {_human(limit)}, below {minimum_gib:g} GiB: "
                      "RDMA cannot pin large buffers under load", "raise the locked-memory "
                      "limit for jobs (memlock unlimited in /etc/security/limits.conf, "
                      "LimitMEMLOCK=infinity for slurmd; srun passes on the submitting "
                      "shell's limit)")
    return passed(item, f"RLIMIT_MEMLOCK {_human(limit)} (at least {minimum_gib:g} GiB)")


def _size(option: str, mem_total: float | None) -> float | None:
    match = re.fullmatch(r"(\d+)([kmgt]?)", option.lower())
    if match:
        return float(match.group(1)) * _UNITS[match.group(2)]
    if option.endswith("%") and option[:-1].isdigit() and mem_total:
        return mem_total * int(option[:-1]) / 100
    return None


def shm_size(node: Node) -> tuple[float | None, str]:
    """(bytes, how they were found) of /dev/shm."""
    mount = node.mount_of("/dev/shm")
    if mount is None or mount.point != "/dev/shm":
        return None, "no file system mounted on /dev/shm"
    if node.root == Path("/"):
        stat = os.statvfs("/dev/shm")
        return float(stat.f_blocks * stat.f_frsize), f"{mount.fstype}, statvfs"
    meminfo = node.read("/proc/meminfo") or ""
    total = re.search(r"MemTotal:\s+(\d+) kB", meminfo)
    mem_total = float(total.group(1)) * 1024 if total else None
    for option in mount.options:
        if option.startswith("size="):
            return _size(option[5:], mem_total), f"{mount.fstype} size={option[5:]}"
    if mount.fstype == "tmpfs" and mem_total:
        return mem_total / 2, "tmpfs without size=: half of MemTotal"
    return None, f"{mount.fstype} with no size= option"


def check_shm(node: Node, minimum_gib: float = SHM_MIN_GIB) -> Finding:
    item = "shm"
    if minimum_gib <= 0:
        return skipped(item, "disabled (--shm-min-gib 0)")
    size, how = shm_size(node)
    if size is None:
        return failed(item, f"/dev/shm: {how}", "mount a tmpfs on /dev/shm (containers: "
                      "--shm-size, or bind the host's /dev/shm)")
    if size < minimum_gib * GIB:
        return failed(item, f"/dev/shm is {_human(size)} ({how}), below {minimum_gib:g} GiB: "
                      "RCCL's shared-memory transport and data-loader workers run out",
                      "give the job a larger /dev/shm (the host's, or --shm-size for a "
                      "container)")
    return passed(item, f"/dev/shm {_human(size)} ({how})")
