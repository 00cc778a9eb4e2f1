"""The image's fingerprint: the libraries a run actually loaded, hashed, and where each
came from.

What a report's figures depend on is the code that ran, not the image's name: the torch
libraries, the GEMM libraries (hipBLASLt, rocBLAS, cuBLAS), MIOpen/cuDNN, RCCL/NCCL, the
network and tuner plugins and libfabric. /proc/self/maps lists every file mapped into the
process (proc(5)); each one matching those names is recorded with its sha256 and its
origin: "image" when it lies on the container's root file system, "host" when it lies on
a mount bound in from the host (the longest mount point above it in /proc/self/mountinfo
that is not "/"), "this environment" outside a container. A site runtime that binds the
host's libfabric or RCCL over the image's (the CXI hook, apptainer --rocm) shows up as a
"host" entry, and ``imagebuild report A B`` lists what differs between two runs.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Library names (basename, case-insensitive) a fingerprint keeps.
LIBRARY = re.compile(
    r"(torch|c10|hipblaslt|rocblas|miopen|rccl|nccl|fabric|amdhip64|hsa-runtime|cublas|cudnn"
    r"|cudart|tensile|roctx|hiprtc|nvrtc|net-ofi|tuner)", re.IGNORECASE)


def mapped_files(maps_text: str) -> list[str]:
    """Files mapped into the process, in first-seen order (proc(5): the sixth column)."""
    seen: dict[str, None] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/") and not parts[5].endswith(")"):
            seen.setdefault(parts[5].strip(), None)
    return list(seen)


def mount_points(mountinfo_text: str) -> list[str]:
    """Mount points from /proc/self/mountinfo (proc(5): the fifth column)."""
    points = []
    for line in mountinfo_text.splitlines():
        parts = line.split()
        if len(parts) > 4:
            points.append(parts[4].replace("\\040", " "))
    return points


def in_container(environ: dict[str, str] | None = None) -> bool:
    environ = dict(os.environ) if environ is None else environ
    markers = ("/.dockerenv", "/run/.containerenv", "/.singularity.d")
    return (any(os.path.exists(m) for m in markers)
            or any(k in environ for k in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER",
                                          "ENROOT_ROOTFS", "container")))


def origin(path: str, mounts: Iterable[str], container: bool) -> str:
    if not container:
        return "this environment"
    above = [m for m in mounts if m != "/" and (path == m or path.startswith(m.rstrip("/") + "/"))]
    if above:
        return f"host (mounted at {max(above, key=len)})"
    return "image"


def sha256_of(path: str) -> str | None:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def fingerprint(maps_text: str | None = None, mountinfo_text: str | None = None,
                container: bool | None = None) -> dict[str, Any]:
    """The loaded libraries of this process: [{name, path, sha256, size, origin}]."""
    try:
        maps_text = Path("/proc/self/maps").read_text() if maps_text is None else maps_text
        mountinfo_text = (Path("/proc/self/mountinfo").read_text() if mountinfo_text is None
                          else mountinfo_text)
    except OSError as exc:
        return {"files": [], "unavailable": f"/proc/self/maps: {exc.strerror}"}
    container = in_container() if container is None else container
    mounts = mount_points(mountinfo_text)
    files = []
    for path in mapped_files(maps_text):
        name = os.path.basename(path)
        if not LIBRARY.search(name):
            continue
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        files.append({"name": name, "path": path, "sha256": sha256_of(path), "size": size,
                      "origin": origin(path, mounts, container)})
    return {"files": files, "in_container": container,
            "source": "/proc/self/maps of rank 0 after the checks"}


def differences(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """What differs between two fingerprints, library by library (by file name)."""
    if not a or not b:
        return []
    left = {f["name"]: f for f in a.get("files", [])}
    right = {f["name"]: f for f in b.get("files", [])}
    lines = []
    for name in sorted(set(left) | set(right)):
        one, two = left.get(name), right.get(name)
        if one is None or two is None:
            have = one or two
            assert have is not None
            lines.append(f"{name}: only in {'1' if one else '2'} ({have['path']}, "
                         f"{have['origin']})")
            continue
        changes = []
        if one.get("sha256") != two.get("sha256"):
            changes.append(f"sha256 {str(one.get('sha256'))[:12]} vs "
                           f"{str(two.get('sha256'))[:12]}")
        if one.get("origin") != two.get("origin"):
            changes.append(f"from {one.get('origin')} vs {two.get('origin')}")
        if one.get("path") != two.get("path"):
            changes.append(f"at {one.get('path')} vs {two.get('path')}")
        if changes:
            lines.append(f"{name}: " + "; ".join(changes))
    return lines
