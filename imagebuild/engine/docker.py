"""Docker: BuildKit through the CLI, the docker SDK for everything else.

A docker client first on PATH may lack buildx and then cannot build with BuildKit at all
(seen with docker 28.x beside Debian's docker.io 20.10, whose built-in BuildKit client works
with ``DOCKER_BUILDKIT=1``), so clients are probed for what they can do, not taken by name.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.engine.base import (
    BuildRequest,
    Engine,
    RunResult,
    build_flags,
)
from imagebuild.errors import EngineError
from imagebuild.images import split_reference
from imagebuild.process import CommandRunner

#: Environment variable forcing the docker client binary (path or name on PATH).
DOCKER_BINARY_ENV = "IMAGEBUILD_DOCKER"


class DockerEngine(Engine):
    """Docker: BuildKit through the CLI (buildx, or the 20.10 built-in client), SDK for the rest."""

    backend = "docker"
    progress_format = "buildkit"

    def __init__(self, binary: str, *, buildx: bool, builder: str | None = None,
                 version: str = "", runner: CommandRunner | None = None, client: Any = None):
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

    def describe(self) -> str:
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
            import docker  # imported lazily: podman-only hosts need not load it

            try:
                self._client = docker.from_env()
            except docker.errors.DockerException as exc:
                raise EngineError(f"docker daemon not reachable: {exc}") from exc
        return self._client

    def build_command(self, request: BuildRequest) -> tuple[list[str], dict[str, str]]:
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
        else:
            argv = [self.binary, "build", "--progress=plain"]
        return argv + build_flags(request) + [str(request.context)], env

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

    def push(self, ref: str) -> str:
        repository, tag = split_reference(ref)
        digest = ""
        try:
            for chunk in self.client.api.push(repository, tag=tag or "latest", stream=True,
                                              decode=True):
                if "error" in chunk:
                    raise EngineError(f"docker push {ref} failed: {chunk['error']}")
                digest = (chunk.get("aux") or {}).get("Digest", digest)
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

