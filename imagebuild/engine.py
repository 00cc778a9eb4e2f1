"""The container-engine seam (DESIGN principle 6): one subprocess runner, one engine object.

Everything that touches a container engine goes through an ``Engine``: build (always the
CLI, because the docker SDK has no BuildKit), and inspect/tag/remove/push/run (the docker
SDK for Docker, the CLI for podman). ``detect_engine`` picks a backend by capability, not
by name: a docker client first on PATH may lack buildx and then cannot build at all with
BuildKit (seen with docker 28.x beside Debian's docker.io 20.10, whose built-in BuildKit
client works with ``DOCKER_BUILDKIT=1``).

Unit tests replace ``CommandRunner`` (and the docker SDK client) at this seam; integration
tests use the real engines.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from imagebuild.errors import EngineError

LineCallback = Callable[[str], None]
Backend = Literal["auto", "docker", "podman"]
BACKENDS: tuple[str, ...] = ("auto", "docker", "podman")

#: Environment variable forcing the docker client binary (path or name on PATH).
DOCKER_BINARY_ENV = "IMAGEBUILD_DOCKER"
#: Environment variable choosing the backend when no --backend is given.
BACKEND_ENV = "IMAGEBUILD_BACKEND"


# --------------------------------------------------------------------------------------
# Subprocess runner
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    #: stdout and stderr merged, in order (only the last ``keep_lines`` lines if bounded).
    output: str


class CommandRunner:
    """Runs a command with stdout+stderr merged, streaming each line to a callback.

    The child runs in its own session, so a terminal Ctrl-C reaches only this process; on
    KeyboardInterrupt (or any exception while streaming) the child's whole process group is
    stopped: SIGINT first (the docker and podman clients then cancel the build in the
    daemon), SIGTERM after ``grace_s``, SIGKILL last. The exception is then re-raised.
    """

    def __init__(self, grace_s: float = 10.0):
        self.grace_s = grace_s

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, on_line: LineCallback | None = None,
            keep_lines: int | None = None) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env=dict(env) if env is not None else None,
                cwd=cwd, start_new_session=True, text=True, errors="replace", bufsize=1,
            )
        except FileNotFoundError as exc:
            raise EngineError(f"{argv[0]}: command not found") from exc
        except PermissionError as exc:
            raise EngineError(f"{argv[0]}: not executable ({exc.strerror})") from exc
        lines: deque[str] = deque(maxlen=keep_lines)
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip("\r\n")
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            returncode = proc.wait()
        except BaseException:
            self._stop(proc)
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
        return CommandResult(argv, returncode, "\n".join(lines))

    def _stop(self, proc: subprocess.Popen) -> None:
        # Remember every descendant first: podman's RUN containers are started by runc in
        # their own session as a pid-namespace init, which ignores SIGINT/SIGTERM and
        # outlives an interrupted `podman build` (measured: podman 4.3 / buildah 1.28).
        # Killing those first lets podman see its RUN step fail and clean up its working
        # containers itself; signalled first, it exits and leaks them.
        descendants = _descendants(proc.pid)
        escaped = [p for p in descendants if p.group() != proc.pid]
        if escaped:
            for process in escaped:
                process.signal(signal.SIGKILL)
            try:
                proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._stop_group(proc)
        survivors = [p for p in descendants if p.alive()]
        for process in survivors:
            process.signal(signal.SIGKILL)

    def _stop_group(self, proc: subprocess.Popen) -> None:
        for sig, wait_s in ((signal.SIGINT, self.grace_s), (signal.SIGTERM, self.grace_s),
                            (signal.SIGKILL, None)):
            if not _signal_group(proc.pid, sig):
                return
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader is gone; members that ignore SIGINT (a shell's background jobs do)
        # would outlive it: end them too.
        if _signal_group(proc.pid, signal.SIGTERM):
            time.sleep(0.2)
            _signal_group(proc.pid, signal.SIGKILL)


@dataclass(frozen=True)
class _Process:
    """A pid plus its start time, so a recycled pid is never signalled by mistake."""

    pid: int
    start: str

    @staticmethod
    def read(pid: int) -> tuple[int, str] | None:
        """(parent pid, start time) from /proc/<pid>/stat, None when gone."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces
        return int(fields[1]), fields[19]

    def alive(self) -> bool:
        now = self.read(self.pid)
        return now is not None and now[1] == self.start

    def group(self) -> int | None:
        try:
            return os.getpgid(self.pid)
        except ProcessLookupError:
            return None

    def signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _descendants(root: int) -> list[_Process]:
    """Every live descendant of ``root`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[tuple[int, str]]] = {}
    try:
        entries = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for pid in entries:
        info = _Process.read(pid)
        if info is not None:
            children.setdefault(info[0], []).append((pid, info[1]))
    found: list[_Process] = []
    pending = [root]
    while pending:
        for pid, start in children.get(pending.pop(), []):
            found.append(_Process(pid, start))
            pending.append(pid)
    return found


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed credentials (setuid): nothing we may do
        return False
    return True


# --------------------------------------------------------------------------------------
# Build request and image references
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuildRequest:
    """One image build, backend-neutral. Secrets are files passed as BuildKit secrets."""

    dockerfile: Path
    context: Path
    tags: tuple[str, ...] = ()
    target: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict)
    #: secret id -> file on the host, mounted with ``RUN --mount=type=secret,id=...``.
    secrets: Mapping[str, Path] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    network: str | None = "host"
    no_cache: bool = False
    #: file the engine writes the built image id into.
    iidfile: Path | None = None


def split_reference(ref: str) -> tuple[str, str | None]:
    """``registry:5000/name:tag`` -> (``registry:5000/name``, ``tag``); digests are kept."""
    if "@" in ref:
        return ref, None
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1:]
    return ref, None


def normalize_image_id(image_id: str) -> str:
    """Podman reports bare hex ids, docker ``sha256:<hex>``: always the latter."""
    image_id = image_id.strip()
    return image_id if ":" in image_id else f"sha256:{image_id}"


def is_loopback_registry(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0][1:]
    return name in ("localhost", "127.0.0.1", "::1") or name.startswith("127.")


# --------------------------------------------------------------------------------------
# Engines
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str


class Engine(ABC):
    """A container engine: builds via its CLI, manages images."""

    #: "docker" or "podman"
    backend: str
    #: which progress format ``build`` emits: "buildkit" or "podman"
    progress_format: str

    def __init__(self, runner: CommandRunner | None = None):
        self.runner = runner or CommandRunner()

    @abstractmethod
    def describe(self) -> str:
        """One line naming the engine and binary, for logs and error messages."""

    @abstractmethod
    def build_command(self, request: BuildRequest) -> tuple[list[str], dict[str, str]]:
        """The build command line and its environment."""

    def build(self, request: BuildRequest, on_line: LineCallback | None = None,
              keep_lines: int | None = 2000) -> CommandResult:
        argv, env = self.build_command(request)
        return self.runner.run(argv, env=env, on_line=on_line, keep_lines=keep_lines)

    @abstractmethod
    def inspect(self, ref: str) -> dict[str, Any]:
        """The engine's image inspect document; EngineError if the image does not exist."""

    @abstractmethod
    def image_exists(self, ref: str) -> bool: ...

    def image_id(self, ref: str) -> str:
        return normalize_image_id(self.inspect(ref)["Id"])

    def image_labels(self, ref: str) -> dict[str, str]:
        config = self.inspect(ref).get("Config") or {}
        return dict(config.get("Labels") or {})

    @abstractmethod
    def tag(self, source: str, target: str) -> None: ...

    @abstractmethod
    def remove(self, ref: str) -> None:
        """Remove one reference (the image goes only when no other tag names it)."""

    @abstractmethod
    def push(self, ref: str) -> str:
        """Push ``ref`` (which names its registry); returns the pushed manifest digest."""

    @abstractmethod
    def run(self, ref: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str = "host", user: str | None = None) -> RunResult:
        """Run a short command in a throwaway container; returns exit code and output."""


def _build_flags(request: BuildRequest) -> list[str]:
    """Flags shared by ``docker build``, ``docker buildx build`` and ``podman build``."""
    flags = ["-f", str(request.dockerfile)]
    for tag in request.tags:
        flags += ["-t", tag]
    if request.target:
        flags += ["--target", request.target]
    for key, value in sorted(request.build_args.items()):
        flags += ["--build-arg", f"{key}={value}"]
    for key, value in sorted(request.labels.items()):
        flags += ["--label", f"{key}={value}"]
    for secret_id, path in sorted(request.secrets.items()):
        flags += ["--secret", f"id={secret_id},src={path}"]
    if request.network:
        flags += ["--network", request.network]
    if request.no_cache:
        flags.append("--no-cache")
    if request.iidfile:
        flags += ["--iidfile", str(request.iidfile)]
    return flags


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
        # plain progress is what the parser in imagebuild.progress reads; no colours.
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
        return argv + _build_flags(request) + [str(request.context)], env

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
        return argv + _build_flags(request) + [str(request.context)], dict(os.environ)

    def inspect(self, ref: str) -> dict[str, Any]:
        result = self._cli("image", "inspect", ref)
        if result.returncode != 0:
            raise EngineError(f"image {ref} not found in {self.describe()}: "
                              f"{_last_line(result.output)}")
        try:
            return json.loads(result.output)[0]
        except (ValueError, IndexError) as exc:
            raise EngineError(f"podman image inspect {ref}: unreadable output") from exc

    def image_exists(self, ref: str) -> bool:
        return self._cli("image", "exists", ref).returncode == 0

    def tag(self, source: str, target: str) -> None:
        result = self._cli("tag", source, target)
        if result.returncode != 0:
            raise EngineError(f"podman tag {source} {target} failed: {_last_line(result.output)}")

    def remove(self, ref: str) -> None:
        if not self.image_exists(ref):
            return
        result = self._cli("rmi", ref)
        if result.returncode != 0:
            raise EngineError(f"podman rmi {ref} failed: {_last_line(result.output)}")

    def push(self, ref: str) -> str:
        registry = ref.split("/", 1)[0]
        with tempfile.TemporaryDirectory(prefix="imagebuild-push-") as tmp:
            digest_file = Path(tmp) / "digest"
            argv = ["push", "--digestfile", str(digest_file)]
            if is_loopback_registry(registry):
                argv.append("--tls-verify=false")  # a loopback test registry speaks plain http
            result = self._cli(*argv, ref)
            if result.returncode != 0:
                raise EngineError(f"podman push {ref} failed: {_last_line(result.output)}")
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


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


# --------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------

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


def _docker_engine(runner: CommandRunner, environ: Mapping[str, str], builder: str | None,
                   client: Any = None) -> tuple[DockerEngine | None, str]:
    probe, notes = find_docker_client(runner, environ, need_buildx=bool(builder))
    if probe is None:
        return None, "; ".join(notes)
    engine = DockerEngine(probe.path, buildx=probe.buildx, builder=builder,
                          version=probe.version, runner=runner, client=client)
    try:
        engine.client.ping()
    except EngineError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - any SDK/transport failure means "unreachable"
        return None, f"docker daemon not reachable: {exc}"
    if builder:
        inspected = runner.run([probe.path, "buildx", "inspect", builder])
        if inspected.returncode != 0:
            raise EngineError(f"--builder {builder}: docker buildx inspect failed: "
                              f"{_last_line(inspected.output)}")
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
        return None, f"podman not usable: {_last_line(result.output)}"
    return PodmanEngine(binary, version=result.output.strip(), runner=runner), ""


def detect_engine(backend: str | None = None, *, builder: str | None = None,
                  runner: CommandRunner | None = None,
                  environ: Mapping[str, str] | None = None, docker_client: Any = None) -> Engine:
    """The engine to build with. ``backend``: auto (default, $IMAGEBUILD_BACKEND), docker, podman.

    auto prefers Docker (a reachable daemon and a BuildKit-capable client), then podman.
    ``builder`` names a buildx builder (remote BuildKit / build farm) and needs buildx.
    """
    environ = os.environ if environ is None else environ
    runner = runner or CommandRunner()
    backend = backend or environ.get(BACKEND_ENV) or "auto"
    if backend not in BACKENDS:
        raise EngineError(f"--backend {backend}: expected one of {', '.join(BACKENDS)}")
    if builder and backend == "podman":
        raise EngineError(f"--builder {builder}: only valid with the docker backend (buildx)")
    reasons: list[str] = []
    if backend in ("auto", "docker"):
        engine, reason = _docker_engine(runner, environ, builder, docker_client)
        if engine:
            return engine
        reasons.append(f"docker: {reason}")
        if backend == "docker" or builder:
            raise EngineError(f"no usable docker backend: {reason}")
    engine_p, reason = _podman_engine(runner, environ)
    if engine_p:
        return engine_p
    reasons.append(f"podman: {reason}")
    raise EngineError("no container engine available (" + "; ".join(reasons) + ")")
