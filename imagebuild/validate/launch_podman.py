"""``--launcher podman``: the checks in an image through podman's CLI (HPC login and
compute nodes often have podman and no Docker daemon)."""

from __future__ import annotations

from imagebuild.engine.podman import inherited_ulimits
from imagebuild.validate.invocation import (
    Invocation,
    container_command,
    container_env,
    container_mounts,
)
from imagebuild.validate.target import Target


def podman_argv(target: Target, invocation: Invocation, binary: str = "podman") -> list[str]:
    command = container_command(invocation)
    # This process's own limits: rootful podman's defaults need CAP_SYS_RESOURCE, which
    # sandboxed hosts lack (the container then never starts); a validation run needs no more.
    argv = [binary, "run", "--rm", "--network", "host", "--ipc", "host",
            *inherited_ulimits(), "--entrypoint", command[0]]
    if invocation.gpus == "rocm":
        argv += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "keep-groups",
                 "--security-opt", "seccomp=unconfined", "--cap-add", "SYS_PTRACE"]
    elif invocation.gpus == "nvidia":
        argv += ["--device", "nvidia.com/gpu=all"]  # CDI, podman's NVIDIA route
    for key, value in sorted(container_env(invocation).items()):
        argv += ["--env", f"{key}={value}"]
    for bind in container_mounts(invocation):
        argv += ["--volume", bind.spec()]
    return argv + [str(target.ref), *command[1:]]
