"""The one place that opens and picks a container engine: by capability, not by name.

``auto`` prefers Docker (a reachable daemon and, to build, a BuildKit-capable client), then
podman. Build, squash, validate and tune all get their engine from ``open_engine``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any, Literal

from imagebuild.engine.base import Engine, last_line
from imagebuild.engine.docker import DockerEngine, docker_sdk_client, find_docker_client
from imagebuild.engine.podman import PodmanEngine
from imagebuild.errors import EngineError
from imagebuild.process import CommandRunner

Backend = Literal["auto", "docker", "podman"]
BACKENDS: tuple[str, ...] = ("auto", "docker", "podman")

#: Environment variable choosing the backend when no --backend is given.
BACKEND_ENV = "IMAGEBUILD_BACKEND"


#: Where the docker SDK looks without DOCKER_HOST (docker.utils.DEFAULT_UNIX_SOCKET).
DEFAULT_DOCKER_HOST = "unix:///var/run/docker.sock"


def _daemon_address(environ: Mapping[str, str]) -> str:
    host = environ.get("DOCKER_HOST")
    return f"DOCKER_HOST={host}" if host else f"{DEFAULT_DOCKER_HOST}, the default (no DOCKER_HOST)"


def _os_error(exc: BaseException, seen: set[int] | None = None) -> OSError | None:
    """The operating system's error under an SDK exception: requests and urllib3 wrap it in
    their own exceptions, as a cause or as an argument (``('Connection aborted.',
    FileNotFoundError(2, ...))``)."""
    seen = set() if seen is None else seen
    if id(exc) in seen:
        return None
    seen.add(id(exc))
    if isinstance(exc, OSError) and isinstance(exc.strerror, str) and exc.strerror:
        return exc  # requests' ConnectionError is an OSError too, with no strerror
    inner = [exc.__cause__, exc.__context__, *(a for a in exc.args
                                                if isinstance(a, BaseException))]
    for candidate in inner:
        if candidate is not None and (found := _os_error(candidate, seen)) is not None:
            return found
    return None


def unreachable_reason(exc: BaseException, environ: Mapping[str, str]) -> str:
    """One short line: where the daemon was looked for and what the system said, not the
    SDK's nested exception text."""
    found = _os_error(exc)
    if found is not None:
        said = str(found.strerror)
        cause = said[:1].lower() + said[1:]
    else:
        text = str(exc).removeprefix("docker daemon not reachable: ")
        cause = (text.strip().splitlines() or [type(exc).__name__])[-1][:160]
    return f"docker daemon not reachable at {_daemon_address(environ)}: {cause}"


def _docker_engine(runner: CommandRunner, environ: Mapping[str, str], builder: str | None,
                   client: Any = None, for_build: bool = True) -> tuple[DockerEngine | None, str]:
    if for_build:
        probe, notes = find_docker_client(runner, environ, need_buildx=bool(builder))
        if probe is None:
            return None, "; ".join(notes)
        engine = DockerEngine(probe.path, buildx=probe.buildx, builder=builder,
                              version=probe.version, runner=runner, client=client)
    else:
        # reading, pushing and running need the daemon only (the SDK), no client binary
        engine = DockerEngine(None, buildx=False, runner=runner, client=client)
    try:
        engine.client.ping()
    except EngineError as exc:  # the SDK could not even make a client (docker.from_env)
        return None, unreachable_reason(exc, environ)
    except Exception as exc:  # noqa: BLE001 - any SDK/transport failure means "unreachable"
        if client is None:
            engine.client.close()  # the SDK's own connection pool, made for this probe
        return None, unreachable_reason(exc, environ)
    if builder and engine.binary is not None:
        inspected = runner.run([engine.binary, "buildx", "inspect", builder])
        if inspected.returncode != 0:
            raise EngineError(f"--builder {builder}: docker buildx inspect failed: "
                              f"{last_line(inspected.output)}")
    return engine, ""


def _podman_engine(runner: CommandRunner, environ: Mapping[str, str]
                   ) -> tuple[PodmanEngine | None, str]:
    binary = shutil.which("podman", path=environ.get("PATH"))
    if not binary:
        return None, "podman not installed"
    try:
        result = runner.run([binary, "version", "--format", "{{.Client.Version}}"])
    except EngineError as exc:
        return None, str(exc)
    if result.returncode != 0:
        return None, f"podman not usable: {last_line(result.output)}"
    return PodmanEngine(binary, version=result.output.strip(), runner=runner), ""


def open_engine(backend: str | None = None, *, builder: str | None = None,
                for_build: bool = True, runner: CommandRunner | None = None,
                environ: Mapping[str, str] | None = None, docker_client: Any = None) -> Engine:
    """The engine to use. ``backend``: auto (default, $IMAGEBUILD_BACKEND), docker, podman.

    auto prefers Docker (a reachable daemon and, with ``for_build``, a BuildKit-capable
    client), then podman. ``builder`` names a buildx builder (remote BuildKit / build farm)
    and needs buildx. ``for_build=False`` opens an engine that reads, pushes and runs
    images only (squash, validate): Docker then needs no client binary.
    """
    environ = os.environ if environ is None else environ
    runner = runner or CommandRunner()
    backend = backend or environ.get(BACKEND_ENV) or "auto"
    if backend not in BACKENDS:
        raise EngineError(f"--backend {backend}: expected one of {', '.join(BACKENDS)}")
    if builder and backend == "podman":
        raise EngineError(f"--builder {builder}: only valid with the docker backend (buildx)")
    if builder and not for_build:
        raise EngineError(f"--builder {builder}: a builder is for builds only")
    reasons: list[str] = []
    if backend in ("auto", "docker"):
        engine, reason = _docker_engine(runner, environ, builder, docker_client, for_build)
        if engine:
            return engine
        reasons.append(f"docker: {reason}")
        if backend == "docker" or builder:
            raise EngineError(f"no usable docker backend: {reason}",
                              hint="start the daemon, point DOCKER_HOST at it, or pass "
                                   "--backend podman")
    engine_p, reason = _podman_engine(runner, environ)
    if engine_p:
        if reasons:  # auto passed Docker over: say why (podman builds from a cold cache)
            engine_p.selection_note = f"docker not used: {reasons[0].removeprefix('docker: ')}"
        return engine_p
    reasons.append(f"podman: {reason}")
    raise EngineError("no container engine available (" + "; ".join(reasons) + ")")


def selection_line(engine: Engine) -> str | None:
    """What a command says when ``auto`` passed Docker over: which engine it uses instead,
    and why (podman starts from a cold cache and holds other images)."""
    if not engine.selection_note:
        return None
    return f"{engine.selection_note}; using {engine.describe()}"


def docker_reachable(client: Any = None) -> bool:
    """Whether a Docker daemon answers here (validate's launcher choice asks)."""
    made = None
    try:
        if client is None:
            client = made = docker_sdk_client()
        client.ping()
        return True
    except Exception:  # noqa: BLE001 - no SDK, no socket, no daemon: all mean "not docker"
        return False
    finally:
        if made is not None:
            made.close()  # the SDK's connection pool, made for this probe
