"""Podman (buildah inside): the CLI for everything; daemonless, so it fits HPC login nodes."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.engine.base import (
    BuildRequest,
    ContainerSpec,
    Engine,
    ListedImage,
    OutputCallback,
    RunResult,
    build_flags,
    last_line,
)
from imagebuild.errors import EngineError
from imagebuild.images import is_loopback_registry, normalize_image_id, split_reference
from imagebuild.process import CommandResult, CommandRunner

if TYPE_CHECKING:
    from imagebuild.convert.sources import ImageSource


#: The first podman with buildah 1.29, whose --cache-from works past ARG instructions.
MIN_REGISTRY_CACHE_VERSION = (4, 4)


def _version_tuple(version: str) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


class PodmanEngine(Engine):
    """Podman (buildah inside): CLI for everything; daemonless, fits HPC login nodes."""

    backend = "podman"
    progress_format = "podman"

    def __init__(self, binary: str = "podman", *, version: str = "",
                 runner: CommandRunner | None = None):
        super().__init__(runner)
        self.binary = binary
        self.version = version

    def describe(self) -> str:
        return f"podman {self.version} ({self.binary})".replace("podman  ", "podman ")

    def _cli(self, *args: str) -> CommandResult:
        return self.runner.run([self.binary, *args])

    def build_command(self, request: BuildRequest) -> tuple[list[str], dict[str, str]]:
        # --format docker: the OCI image format drops SHELL (and HEALTHCHECK), which the
        # rendered Dockerfiles rely on for `set -o pipefail`.
        argv = [self.binary, "build", "--layers", "--format", "docker"]
        cache = request.cache
        if cache is not None and cache.cache_from:
            argv += ["--cache-from", cache.cache_from]
        if cache is not None and cache.cache_to:
            argv += ["--cache-to", cache.cache_to]
        return argv + build_flags(request) + [str(request.context)], dict(os.environ)

    def registry_cache_problem(self) -> str | None:
        """buildah before 1.29 (podman before 4.4) never looks in the registry again after
        an ARG instruction of a stage (containers/buildah#4315, fixed by #4326), and every
        stage of imagebuild's Dockerfiles but the first declares one: the cache would be
        pushed and not used. Measured with Debian 12's podman 4.3.1."""
        version = _version_tuple(self.version)
        if version is not None and version < MIN_REGISTRY_CACHE_VERSION:
            return (f"podman {self.version} (buildah 1.28 or older) uses no registry cache "
                    "after a stage's first ARG instruction, and every stage here has one; "
                    "podman 4.4 or newer does")
        return None

    def attestation_problem(self) -> str | None:
        return f"podman {self.version} makes no provenance attestations".replace("  ", " ")

    def inspect(self, ref: str) -> dict[str, Any]:
        result = self._cli("image", "inspect", ref)
        if result.returncode != 0:
            raise EngineError(f"image {ref} not found in {self.describe()}: "
                              f"{last_line(result.output)}")
        try:
            return json.loads(result.output)[0]
        except (ValueError, IndexError) as exc:
            raise EngineError(f"podman image inspect {ref}: unreadable output") from exc

    def image_exists(self, ref: str) -> bool:
        return self._cli("image", "exists", ref).returncode == 0

    def tag(self, source: str, target: str) -> None:
        result = self._cli("tag", source, target)
        if result.returncode != 0:
            raise EngineError(f"podman tag {source} {target} failed: {last_line(result.output)}")

    def remove(self, ref: str) -> None:
        if not self.image_exists(ref):
            return
        result = self._cli("rmi", ref)
        if result.returncode != 0:
            raise EngineError(f"podman rmi {ref} failed: {last_line(result.output)}")

    def list_images(self, repository: str) -> list[ListedImage]:
        result = self._cli("images", "--format", "json", "--filter",
                           f"reference={repository}")
        if result.returncode != 0:
            raise EngineError(f"podman images: {last_line(result.output)}")
        try:
            found = json.loads(result.output or "[]")
        except ValueError as exc:
            raise EngineError("podman images: unreadable output") from exc
        # podman names local images localhost/<repository>/...
        return sorted((ListedImage(name.removeprefix("localhost/"),
                                   normalize_image_id(item["Id"]), int(item.get("Size", 0)))
                       for item in found for name in item.get("Names") or ()
                       if split_reference(name.removeprefix("localhost/"))[0] == repository),
                      key=lambda i: i.ref)

    def push(self, ref: str) -> str:
        registry = ref.split("/", 1)[0]
        with tempfile.TemporaryDirectory(prefix="imagebuild-push-") as tmp:
            digest_file = Path(tmp) / "digest"
            argv = ["push", "--digestfile", str(digest_file)]
            if is_loopback_registry(registry):
                argv.append("--tls-verify=false")  # a loopback test registry speaks plain http
            result = self._cli(*argv, ref)
            if result.returncode != 0:
                raise EngineError(f"podman push {ref} failed: {last_line(result.output)}")
            return digest_file.read_text().strip()

    def run(self, ref: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str = "host", user: str | None = None) -> RunResult:
        argv = ["run", "--rm", "--network", network]
        for key, value in sorted((env or {}).items()):
            argv += ["-e", f"{key}={value}"]
        if user:
            argv += ["--user", user]
        result = self._cli(*argv, ref, *command)
        if result.returncode == 126 and "error setting rlimit" in result.output:
            # Rootful podman raises nofile to 1048576 and nproc to 32768; without
            # CAP_SYS_RESOURCE (sandboxed VMs, measured on a Firecracker CI VM) runc cannot,
            # and the container never starts. Inherit this process's limits instead.
            result = self._cli(*argv, *inherited_ulimits(), ref, *command)
        return RunResult(result.returncode, result.output)

    def run_container(self, spec: ContainerSpec, on_output: OutputCallback) -> int:
        # The runner stops the client (and with it the --rm container) on Ctrl-C.
        result = self.runner.run(container_argv(spec, self.binary),
                                 on_line=lambda line: on_output(f"{line}\n".encode()),
                                 keep_lines=1)
        return result.returncode

    def image_source(self, ref: str, read: str = "auto") -> ImageSource:
        from imagebuild.convert.sources import PodmanSource

        return PodmanSource(ref, self.binary, runner=self.runner, read=read)


def container_argv(spec: ContainerSpec, binary: str = "podman") -> list[str]:
    """``podman run`` for ``spec`` (unit-tested without podman)."""
    # This process's own limits: rootful podman's defaults need CAP_SYS_RESOURCE, which
    # sandboxed hosts lack (the container then never starts); a validation run needs no more.
    argv = [binary, "run", "--rm", "--network", "host", "--ipc", "host",
            *inherited_ulimits(), "--entrypoint", spec.entrypoint[0]]
    if spec.gpus == "rocm":
        argv += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "keep-groups",
                 "--security-opt", "seccomp=unconfined", "--cap-add", "SYS_PTRACE"]
    elif spec.gpus == "nvidia":
        argv += ["--device", "nvidia.com/gpu=all"]  # CDI, podman's NVIDIA route
    for key, value in sorted(spec.env.items()):
        argv += ["--env", f"{key}={value}"]
    for mount in spec.mounts:
        argv += ["--volume", f"{mount.source}:{mount.target}"
                 + (":ro" if mount.read_only else "")]
    return argv + [spec.image, *spec.entrypoint[1:], *spec.command]


def inherited_ulimits() -> list[str]:
    """``--ulimit`` flags for this process's own hard limits (always allowed to keep).

    nproc stays below pid_max: on the VM measured, runc refused nproc >= pid_max (32768)
    even as root.
    """
    import resource

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = 32768
    limits = []
    if nofile != resource.RLIM_INFINITY:
        limits += ["--ulimit", f"nofile={nofile}:{nofile}"]
    nproc = pid_max - 1 if nproc == resource.RLIM_INFINITY else min(nproc, pid_max - 1)
    return limits + ["--ulimit", f"nproc={nproc}:{nproc}"]

