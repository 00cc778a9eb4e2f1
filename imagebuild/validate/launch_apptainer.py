"""``--launcher apptainer``: the checks in a .sif through apptainer (or singularity on
hosts that have only that; same CLI for ``exec``)."""

from __future__ import annotations

import shutil
from collections.abc import Callable

from imagebuild.validate.invocation import (
    Invocation,
    container_command,
    container_env,
    container_mounts,
)
from imagebuild.validate.target import Target


def apptainer_binary(which: Callable[[str], str | None] = shutil.which) -> str:
    """apptainer, or singularity on hosts that have only that (same CLI for ``exec``)."""
    if which("apptainer") or not which("singularity"):
        return "apptainer"
    return "singularity"


def apptainer_gpu_flags(gpus: str, bind_host_rocm: bool) -> list[str]:
    # apptainer mounts the host's /dev, so /dev/kfd and /dev/dri are there without --rocm;
    # --rocm would bind the host's ROCm libraries over the ones the image's torch was built
    # against. --nv is needed: an image carries no NVIDIA driver libraries.
    if gpus == "rocm" and bind_host_rocm:
        return ["--rocm"]
    if gpus == "nvidia":
        return ["--nv"]
    return []


def apptainer_argv(target: Target, invocation: Invocation, binary: str | None = None
                   ) -> list[str]:
    argv = [binary or apptainer_binary(), "exec",
            *apptainer_gpu_flags(invocation.gpus, invocation.bind_host_rocm)]
    for key, value in sorted(container_env(invocation).items()):
        argv += ["--env", f"{key}={value}"]
    for bind in container_mounts(invocation):
        argv += ["--bind", bind.spec()]
    return argv + [str(target.ref), *container_command(invocation)]
