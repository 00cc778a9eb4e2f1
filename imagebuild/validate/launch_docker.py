"""``--launcher docker``: the checks in an image through the docker SDK, host network and
IPC, GPUs passed through (/dev/kfd and /dev/dri with the devices' groups on ROCm, a GPU
device request on NVIDIA)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagebuild.errors import EngineError
from imagebuild.validate.events import EventStream
from imagebuild.validate.invocation import (
    Invocation,
    container_command,
    container_env,
    container_mounts,
)
from imagebuild.validate.stage_checks import IMAGE_PACKAGE
from imagebuild.validate.target import Target, rocm_device_groups


def docker_run_kwargs(target: Target, invocation: Invocation,
                      dev: Path = Path("/dev")) -> dict[str, Any]:
    """Keyword arguments for docker SDK ``containers.run`` (unit-tested without a daemon)."""
    command = container_command(invocation)
    # Entrypoint: the runner's module (behind the loader-path shell when there is one).
    entry = command.index(IMAGE_PACKAGE) + 1
    kwargs: dict[str, Any] = {
        "image": target.ref,
        "entrypoint": command[:entry],
        "command": command[entry:],
        "environment": container_env(invocation),
        # Host network: NCCL/gloo rendezvous and RDMA NICs as on the host. Host IPC: NCCL
        # and RCCL use /dev/shm between ranks; docker's default 64 MB is too small.
        "network_mode": "host",
        "ipc_mode": "host",
        "detach": True,
        "volumes": {bind.source: {"bind": bind.target, "mode": "ro" if bind.read_only else "rw"}
                    for bind in container_mounts(invocation)},
    }
    if invocation.gpus == "rocm":
        nodes = [dev / "kfd", dev / "dri"]
        kwargs["devices"] = [f"{n}:{n}:rwm" for n in nodes if n.exists()]
        kwargs["group_add"] = [str(g) for g in rocm_device_groups(dev)]
        # AMD's container guidance for ROCm: unconfined seccomp, ptrace for the debugger
        # API some runtime paths use.
        kwargs["security_opt"] = ["seccomp=unconfined"]
        kwargs["cap_add"] = ["SYS_PTRACE"]
    elif invocation.gpus == "nvidia":
        import docker

        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1,
                                                                capabilities=[["gpu"]])]
    return kwargs


def run_docker(target: Target, invocation: Invocation, stream: EventStream,
               client: Any = None) -> int:
    import docker

    try:
        client = client or docker.from_env()
        container = client.containers.run(**docker_run_kwargs(target, invocation))
    except docker.errors.ImageNotFound as exc:
        raise EngineError(f"image {target.ref} not found in the docker engine "
                          f"(build it first: imagebuild build)") from exc
    except docker.errors.DockerException as exc:
        raise EngineError(f"docker could not start {target.ref}: {exc}") from exc
    try:
        for chunk in container.logs(stream=True, follow=True):
            stream.feed(chunk)
        stream.close()
        status = container.wait()
        return int(status.get("StatusCode", 2))
    except KeyboardInterrupt:
        container.kill()
        raise
    finally:
        try:
            container.remove(force=True)
        except docker.errors.DockerException:
            pass
