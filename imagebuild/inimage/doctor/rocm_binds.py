"""rocm-binds: no host ROCm library is bound over the image's.

The image's ROCm user space is built and tested as one set; a host's libraries bound
over it (apptainer --rocm, a vendor hook, a site bind of /opt/rocm) mix two releases in
one process: symbol errors at best, wrong results or hangs at worst
(https://github.com/apptainer/apptainer/issues/1621). From the host, doctor reads the
launch settings (the site's binds and apptainer.bind_host_rocm); inside the image it
reads the mount table (/proc/self/mountinfo), where a bind mount shows its target.
apptainer --rocm binds each host library of its rocmliblist.conf read-only, one file at a
time, into /.singularity.d/libs and puts that directory on LD_LIBRARY_PATH
(https://github.com/apptainer/apptainer/blob/main/etc/rocmliblist.conf; addLibsMount in
https://github.com/apptainer/apptainer/blob/main/internal/pkg/runtime/engine/apptainer/container_linux.go),
so those mounts are found by the library's name.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from .finding import Finding, failed, passed
from .node import Mount, Node

ITEM = "rocm-binds"
ROCM_PREFIXES = ("/opt/rocm",)
ROCM_LIBRARIES = ("libamdhip64.so", "librccl.so", "libhsa-runtime64.so", "libamd_smi.so",
                  "librocm_smi64.so", "libMIOpen.so", "librocblas.so", "libhipblaslt.so",
                  "libroctx64.so", "librocprofiler", "libhsakmt.so", "libamd_comgr.so")


def is_rocm_path(path: str) -> bool:
    name = posixpath.basename(path)
    return (any(path == p or path.startswith(p) for p in ROCM_PREFIXES)
            or any(name.startswith(lib) for lib in ROCM_LIBRARIES))


def bound_over(mounts: Iterable[Mount], image_root: str = "/") -> list[tuple[str, Mount]]:
    """(path in the image, mount) for each mount on a ROCm path of the image."""
    found = []
    prefix = image_root.rstrip("/")
    for mount in mounts:
        point = mount.point
        if prefix:
            if not point.startswith(prefix + "/"):
                continue
            point = point[len(prefix):]
        if is_rocm_path(point):
            found.append((point, mount))
    return found


def check_launch(binds: Iterable[str], bind_host_rocm: bool) -> Finding:
    """From the host: what the launcher will bind."""
    if bind_host_rocm:
        return failed(ITEM, "the launch binds the host's ROCm over the image's (apptainer "
                      "--rocm)", "drop --bind-host-rocm / set the site's "
                      "apptainer.bind_host_rocm: false")
    for bind in binds:
        target = bind.split(":")[1] if ":" in bind else bind
        if is_rocm_path(target):
            return failed(ITEM, f"the site binds {bind}, a ROCm path of the image",
                          "remove that bind from the site profile")
    return passed(ITEM, "the launch binds no host ROCm library over the image's")


def check_mounts(node: Node, image_root: str = "/") -> Finding:
    """Inside the image: what is mounted over its ROCm."""
    found = bound_over(node.mountinfo(), image_root)
    if found:
        path, mount = found[0]
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        return failed(ITEM, f"{path} is a mount of {mount.source}:{mount.root} over the "
                      f"image's ROCm{more}", "launch without the host ROCm binding (apptainer "
                      "without --rocm; no /opt/rocm bind or hook)")
    return passed(ITEM, "nothing is mounted over the image's ROCm (/proc/self/mountinfo)")
