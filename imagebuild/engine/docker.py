"""Docker: BuildKit through the CLI, the docker SDK for everything else.

This module is the only place a docker SDK client is created (``docker_sdk_client``).

A docker client first on PATH may lack buildx and then cannot build with BuildKit at all
(seen with docker 28.x beside Debian's docker.io 20.10, whose built-in BuildKit client works
with ``DOCKER_BUILDKIT=1``), so clients are probed for what they can do, not taken by name.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
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
from imagebuild.engine.cache import buildkit_export_flags, buildkit_import_flags
from imagebuild.errors import EngineError
from imagebuild.images import normalize_image_id, split_reference
from imagebuild.process import CommandRunner

if TYPE_CHECKING:
    from imagebuild.convert.sources import ImageSource

#: Environment variable forcing the docker client binary (path or name on PATH).
DOCKER_BINARY_ENV = "IMAGEBUILD_DOCKER"
#: What ``docker info`` reports as the storage driver type of the containerd image store.
CONTAINERD_STORE = "io.containerd.snapshotter.v1"
_NOT_PROBED = "not probed"
#: A push's closing status line: "<tag>: digest: sha256:... size: N".
_PUSHED = re.compile(r"^\S+: digest: (sha256:[0-9a-f]{64}) size: \d+$")


def docker_sdk_client() -> Any:
    """A docker SDK client for the daemon the environment names (DOCKER_HOST, else the
    default socket); EngineError when the SDK cannot make one. Does not ping."""
    import docker  # imported lazily: podman-only hosts need not load it

    try:
        return docker.from_env()
    except docker.errors.DockerException as exc:
        raise EngineError(f"docker daemon not reachable: {exc}") from exc


class DockerEngine(Engine):
    """Docker: BuildKit through the CLI (buildx, or the 20.10 built-in client), SDK for the rest."""

    backend = "docker"
    progress_format = "buildkit"

    def __init__(self, binary: str | None, *, buildx: bool, builder: str | None = None,
                 version: str = "", runner: CommandRunner | None = None, client: Any = None):
        """``binary``: the BuildKit-capable docker client to build with; None for an engine
        opened only to read, push and run images (the SDK needs no client binary)."""
        super().__init__(runner)
        if builder and not buildx:
            raise EngineError(
                f"--builder {builder}: selecting a builder needs docker buildx, "
                f"and {binary} has no buildx plugin")
        self.binary = binary
        self.buildx = buildx
        self.builder = builder
        self.version = version
        self._client = client
        self._export_problem: str | None = _NOT_PROBED

    def describe(self) -> str:
        if self.binary is None:
            return "docker (the daemon through the docker SDK)"
        how = f"buildx builder {self.builder}" if self.builder else (
            "buildx" if self.buildx else "built-in BuildKit")
        return f"docker {self.version} ({self.binary}, {how})".replace("docker  ", "docker ")

    def using_builder(self, builder: str) -> DockerEngine:
        """This engine building on the buildx builder ``builder`` (remote BuildKit, farm)."""
        if builder == self.builder:
            return self
        return DockerEngine(self.binary, buildx=self.buildx, builder=builder,
                            version=self.version, runner=self.runner, client=self._client)

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_sdk_client()
        return self._client

    def build_command(self, request: BuildRequest) -> tuple[list[str], dict[str, str]]:
        if self.binary is None:
            raise EngineError("docker: this engine was opened without a BuildKit-capable "
                              "docker client and cannot build")
        env = dict(os.environ)
        # plain progress is what the parser in imagebuild.engine.progress reads; no colours.
        env.update(DOCKER_BUILDKIT="1", BUILDKIT_PROGRESS="plain", NO_COLOR="1")
        if self.buildx:
            argv = [self.binary, "buildx", "build", "--progress=plain", "--load"]
            if self.builder:
                argv += ["--builder", self.builder]
                if request.network == "host":
                    # a non-default builder refuses host networking unless entitled
                    argv += ["--allow", "network.host"]
            argv += buildkit_import_flags(request.cache)
            if request.provenance:
                argv.append("--provenance=mode=max")
        else:
            argv = [self.binary, "build", "--progress=plain"]
        return argv + build_flags(request) + [str(request.context)], env

    def registry_cache_problem(self) -> str | None:
        return self._exports()

    def attestation_problem(self) -> str | None:
        return self._exports()

    def _exports(self) -> str | None:
        """Why this client and builder export neither caches nor attestations (None: they
        do). buildx refuses both on its docker driver unless the daemon keeps images in the
        containerd image store (https://docs.docker.com/build/cache/backends/); Docker
        20.10's built-in BuildKit has no ``--cache-to`` and makes no attestations."""
        if self._export_problem != _NOT_PROBED:
            return self._export_problem
        if self.binary is None:
            problem: str | None = "this docker engine was opened without a client to build with"
        elif not self.buildx:
            problem = (f"docker {self.version}'s built-in BuildKit (DOCKER_BUILDKIT=1, no "
                       "buildx) cannot: `docker build` has no --cache-to and makes no "
                       "attestations (BUILDKIT_INLINE_CACHE keeps only the final image's "
                       "layers)")
        else:
            problem = self._builder_problem()
        self._export_problem = problem
        return problem

    def _builder_problem(self) -> str | None:
        assert self.binary is not None
        name = self.builder or "default"
        inspected = self.runner.run([self.binary, "buildx", "inspect",
                                     *([self.builder] if self.builder else [])])
        if inspected.returncode != 0:
            return f"docker buildx inspect {name} failed: {last_line(inspected.output)}"
        driver = re.search(r"^Driver:\s*(\S+)", inspected.output, re.MULTILINE)
        if driver is None or driver[1] != "docker":
            return None  # docker-container, remote, kubernetes: BuildKit's own exporters
        try:
            status = dict(self.client.info().get("DriverStatus") or [])
        except self._errors().DockerException as exc:
            return f"docker info failed: {exc}"
        if status.get("driver-type") == CONTAINERD_STORE:
            return None
        return (f"the buildx builder {name} uses the docker driver on a daemon without the "
                "containerd image store, which exports no cache and no attestations")

    def cache_export_commands(self, request: BuildRequest
                              ) -> list[tuple[str, list[str], dict[str, str]]]:
        """One build per stage, from the local cache, exporting that stage's entry."""
        if request.cache is None or not self.buildx:
            return []
        commands = []
        for stage, ref in request.cache.export_refs().items():
            argv, env = self.build_command(replace(request, target=stage, tags=(),
                                                   iidfile=None, provenance=False))
            argv.remove("--load")
            commands.append((stage, [*argv[:-1], *buildkit_export_flags(ref), argv[-1]], env))
        return commands

    def _errors(self) -> Any:
        import docker

        return docker.errors

    def inspect(self, ref: str) -> dict[str, Any]:
        errors = self._errors()
        try:
            return self.client.api.inspect_image(ref)
        except errors.ImageNotFound as exc:
            raise EngineError(f"image {ref} not found in {self.describe()}") from exc
        except errors.DockerException as exc:
            raise EngineError(f"docker inspect {ref} failed: {exc}") from exc

    def image_exists(self, ref: str) -> bool:
        errors = self._errors()
        try:
            self.client.api.inspect_image(ref)
        except errors.ImageNotFound:
            return False
        except errors.DockerException as exc:
            raise EngineError(f"docker inspect {ref} failed: {exc}") from exc
        return True

    def tag(self, source: str, target: str) -> None:
        repository, tag = split_reference(target)
        try:
            ok = self.client.api.tag(source, repository, tag or "latest")
        except self._errors().DockerException as exc:
            raise EngineError(f"docker tag {source} {target} failed: {exc}") from exc
        if not ok:
            raise EngineError(f"docker tag {source} {target} failed")

    def remove(self, ref: str) -> None:
        errors = self._errors()
        try:
            self.client.api.remove_image(ref, noprune=False)
        except errors.ImageNotFound:
            return
        except errors.DockerException as exc:
            raise EngineError(f"docker rmi {ref} failed: {exc}") from exc

    def list_images(self, repository: str) -> list[ListedImage]:
        try:
            found = self.client.api.images(filters={"reference": repository})
        except self._errors().DockerException as exc:
            raise EngineError(f"docker images {repository}: {exc}") from exc
        return sorted((ListedImage(tag, normalize_image_id(item["Id"]), int(item["Size"]))
                       for item in found for tag in item.get("RepoTags") or ()
                       if split_reference(tag)[0] == repository), key=lambda i: i.ref)

    def push(self, ref: str) -> str:
        repository, tag = split_reference(ref)
        digest = ""
        try:
            for chunk in self.client.api.push(repository, tag=tag or "latest", stream=True,
                                              decode=True):
                if "error" in chunk:
                    raise EngineError(f"docker push {ref} failed: {chunk['error']}")
                digest = (chunk.get("aux") or {}).get("Digest", digest)
                # The containerd image store (Docker 26) reports the digest only as text.
                if not digest and (said := _PUSHED.match(chunk.get("status") or "")):
                    digest = said[1]
        except self._errors().DockerException as exc:
            raise EngineError(f"docker push {ref} failed: {exc}") from exc
        if not digest:
            raise EngineError(f"docker push {ref}: the daemon reported no manifest digest")
        return digest

    def run(self, ref: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str = "host", user: str | None = None) -> RunResult:
        errors = self._errors()
        try:
            container = self.client.containers.create(
                ref, list(command), environment=dict(env or {}), network_mode=network,
                user=user or "", detach=True)
        except errors.DockerException as exc:
            raise EngineError(f"docker run {ref} failed: {exc}") from exc
        try:
            container.start()
            status = container.wait()
            output = container.logs(stdout=True, stderr=True).decode(errors="replace")
            return RunResult(int(status.get("StatusCode", -1)), output)
        except errors.DockerException as exc:
            raise EngineError(f"docker run {ref} failed: {exc}") from exc
        finally:
            try:
                container.remove(force=True)
            except errors.DockerException:
                pass

    def run_container(self, spec: ContainerSpec, on_output: OutputCallback) -> int:
        errors = self._errors()
        try:
            container = self.client.containers.run(**container_kwargs(spec))
        except errors.ImageNotFound as exc:
            raise EngineError(f"image {spec.image} not found in the docker engine "
                              f"(build it first: imagebuild build)") from exc
        except errors.DockerException as exc:
            raise EngineError(f"docker could not start {spec.image}: {exc}") from exc
        try:
            for chunk in container.logs(stream=True, follow=True):
                on_output(chunk)
            status = container.wait()
            return int(status.get("StatusCode", 2))
        except KeyboardInterrupt:
            container.kill()
            raise
        finally:
            try:
                container.remove(force=True)
            except errors.DockerException:
                pass

    def image_source(self, ref: str, read: str = "auto") -> ImageSource:
        from imagebuild.convert.sources import DockerSource

        return DockerSource(ref, self.client, read=read, runner=self.runner)

    def daemon_ref(self, ref: str) -> str | None:
        return ref


def container_kwargs(spec: ContainerSpec, dev: Path = Path("/dev")) -> dict[str, Any]:
    """Keyword arguments for docker SDK ``containers.run`` (unit-tested without a daemon)."""
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "entrypoint": list(spec.entrypoint),
        "command": list(spec.command),
        "environment": dict(spec.env),
        "network_mode": "host",
        "ipc_mode": "host",
        "detach": True,
        "volumes": {mount.source: {"bind": mount.target,
                                   "mode": "ro" if mount.read_only else "rw"}
                    for mount in spec.mounts},
    }
    if spec.gpus == "rocm":
        nodes = [dev / "kfd", dev / "dri"]
        kwargs["devices"] = [f"{n}:{n}:rwm" for n in nodes if n.exists()]
        kwargs["group_add"] = [str(g) for g in rocm_device_groups(dev)]
        # AMD's container guidance for ROCm: unconfined seccomp, ptrace for the debugger
        # API some runtime paths use.
        kwargs["security_opt"] = ["seccomp=unconfined"]
        kwargs["cap_add"] = ["SYS_PTRACE"]
    elif spec.gpus == "nvidia":
        import docker

        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1,
                                                                capabilities=[["gpu"]])]
    return kwargs


def rocm_device_groups(dev: Path = Path("/dev")) -> list[int]:
    """Numeric groups owning /dev/kfd and /dev/dri/renderD*: group names (video, render)
    need not exist in the image's /etc/group, numbers always work."""
    gids: list[int] = []
    for node in [dev / "kfd", *sorted((dev / "dri").glob("renderD*"))]:
        try:
            gid = node.stat().st_gid
        except OSError:
            continue
        if gid not in gids and gid != 0:
            gids.append(gid)
    return gids



@dataclass(frozen=True)
class DockerClientProbe:
    path: str
    buildx: bool
    #: `DOCKER_BUILDKIT=1 docker build` works without buildx (clients before 23.0).
    builtin_buildkit: bool
    version: str

    @property
    def can_build(self) -> bool:
        return self.buildx or self.builtin_buildkit


def probe_docker_client(path: str, runner: CommandRunner) -> DockerClientProbe:
    """What a docker client binary can do, from its own answers (no build, no daemon)."""
    version = runner.run([path, "version", "--format", "{{.Client.Version}}"])
    buildx = runner.run([path, "buildx", "version"]).returncode == 0
    builtin = False
    if not buildx:
        # Newer clients answer "BuildKit is enabled but the buildx component is missing"
        # and exit 1; 20.10 prints the BuildKit flags (--secret) and exits 0.
        help_env = dict(os.environ, DOCKER_BUILDKIT="1")
        helped = runner.run([path, "build", "--help"], env=help_env)
        builtin = helped.returncode == 0 and "--secret" in helped.output
    first = version.output.strip().splitlines()
    return DockerClientProbe(path, buildx, builtin, first[0] if first else "")


def docker_client_candidates(environ: Mapping[str, str]) -> list[str]:
    """IMAGEBUILD_DOCKER alone when set; else every distinct `docker` on PATH, in order."""
    forced = environ.get(DOCKER_BINARY_ENV)
    if forced:
        found = shutil.which(forced, path=environ.get("PATH"))
        if not found:
            raise EngineError(f"{DOCKER_BINARY_ENV}={forced}: no such executable")
        return [found]
    seen: set[str] = set()
    paths: list[str] = []
    for directory in environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = Path(directory or ".") / "docker"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            real = str(candidate.resolve())
            if real not in seen:
                seen.add(real)
                paths.append(str(candidate))
    return paths


def find_docker_client(runner: CommandRunner, environ: Mapping[str, str],
                       need_buildx: bool = False) -> tuple[DockerClientProbe | None, list[str]]:
    """The best docker client: the first with buildx, else the first with built-in BuildKit.

    Returns the probe (or None) and one note per rejected client, for the error message.
    """
    probes = [probe_docker_client(path, runner) for path in docker_client_candidates(environ)]
    notes = [f"{p.path} ({p.version or 'unknown version'}): "
             + ("no buildx plugin" if need_buildx and not p.buildx else
                "no buildx plugin and no built-in BuildKit")
             for p in probes if not (p.buildx if need_buildx else p.can_build)]
    for probe in probes:
        if probe.buildx:
            return probe, notes
    if not need_buildx:
        for probe in probes:
            if probe.builtin_buildkit:
                return probe, notes
    if not probes:
        notes.append("no docker client on PATH")
    return None, notes

