"""miopen: MIOpen's user database and kernel cache on node-local, writable storage.

MIOpen keeps both under $HOME by default ($HOME/.config/miopen and $HOME/.cache/miopen:
https://rocm.docs.amd.com/projects/MIOpen/en/latest/conceptual/cache.html), which on a
cluster is a shared file system: every rank of every node races on one SQLite file, and
SQLite's locking fails on Lustre ("Internal error while accessing SQLite database:
locking protocol", https://github.com/ROCm/MIOpen/issues/2214). A read-only place (the
image) fails too. The file system is read from /proc/mounts.
"""

from __future__ import annotations

import re

from .finding import Finding, failed, passed, warned
from .node import Node

ITEM = "miopen"
#: File systems shared between nodes (network and parallel file systems).
SHARED = ("lustre", "nfs", "nfs4", "gpfs", "beegfs", "cifs", "smb3", "ceph", "dvs", "wekafs",
          "fuse.sshfs", "glusterfs", "panfs")
VARIABLES = (("MIOPEN_USER_DB_PATH", ".config/miopen"), ("MIOPEN_CUSTOM_CACHE_DIR", ".cache/miopen"))
#: Read-only whatever their options say: a kernel squashfs, and squashfuse's FUSE mounts
#: (enroot and unprivileged apptainer mount a .sqsh/.sif with squashfuse; /proc/mounts
#: then shows "fuse.squashfuse_ll ... rw": https://github.com/vasi/squashfuse).
READ_ONLY = ("squashfs", "fuse.squashfuse", "fuse.squashfuse_ll")
REFERENCE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def expand(value: str, env: dict[str, str]) -> str:
    return REFERENCE.sub(lambda m: env.get(m.group(1) or m.group(2), m.group(0)), value)


def check(node: Node, env: dict[str, str]) -> Finding:
    mounts = node.mounts()
    if not mounts:
        return warned(ITEM, "no /proc/mounts to read", "run doctor on the compute node")
    problems, places = [], []
    for variable, default in VARIABLES:
        if env.get(variable):
            path, origin = expand(env[variable], env), variable
        else:
            path, origin = f"{env.get('HOME', '/root').rstrip('/')}/{default}", \
                f"{variable} unset, MIOpen's default"
        mount = node.mount_of(path, mounts)
        if mount is None:
            continue
        where = f"{path} ({origin}) is on {mount.fstype} {mount.point}"
        if mount.fstype in SHARED:
            problems.append(f"{where}, shared between nodes")
        elif "ro" in mount.options or mount.fstype in READ_ONLY:
            problems.append(f"{where}, read-only")
        elif f"{path} on {mount.fstype}" not in places:
            places.append(f"{path} on {mount.fstype}")
    if problems:
        return failed(ITEM, "; ".join(problems), "set MIOPEN_USER_DB_PATH and "
                      "MIOPEN_CUSTOM_CACHE_DIR to node-local storage "
                      "(/tmp/${USER}-miopen-cache) and MIOPEN_DEBUG_DISABLE_SQL_WAL=1")
    return passed(ITEM, "MIOpen's database and cache are node-local: " + "; ".join(places))
