"""Host side of ``imagebuild validate``: run the in-image checks somewhere, collect the report.

Where the checks run:
- ``local``: this Python environment (``python -m imagebuild.validate.checks``);
- ``docker``: the docker SDK, host network and IPC, GPUs passed through (/dev/kfd and
  /dev/dri with the devices' groups on ROCm, a GPU device request on NVIDIA);
- ``podman``, ``apptainer`` (or ``singularity``), ``enroot``: their CLIs, same devices;
- ``sbatch``: writes a batch script for a multi-node run and returns its path
  (imagebuild.validate.launch_sbatch).

All of them run the same runner with ``--events --report -``: progress and the final
report come back as JSON lines on stdout (checks.report.EVENT_PREFIX), so no file has to
travel out of a container. The host writes the report file.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.engine.podman import inherited_ulimits
from imagebuild.errors import EngineError, ValidateError
from imagebuild.validate.bundle import IMAGE_LIB, IMAGE_PACKAGE, stage
from imagebuild.validate.checks.report import EVENT_PREFIX, default_report_path, utc_now
from imagebuild.validate.launch_sbatch import (
    SbatchSpec,
    sbatch_script,  # noqa: F401  (re-exported)
    write_sbatch,
)

LAUNCHERS = ("auto", "local", "docker", "podman", "apptainer", "enroot", "sbatch")
GPU_KINDS = ("auto", "rocm", "nvidia", "none")

#: Host environment variables handed to the checks in a container: the ones that steer
#: RCCL/NCCL, libfabric, HIP/CUDA device visibility and the validation itself.
PASS_ENV_PREFIXES = ("NCCL_", "RCCL_", "FI_", "HSA_", "HIP_", "ROCR_", "MIOPEN_", "PYTORCH_",
                     "TORCH_", "IMAGEBUILD_MANIFEST", "GLOO_")
PASS_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")

#: Where host-side inputs (converted thresholds) appear inside a container.
CONTAINER_INPUTS = "/imagebuild-inputs"

Event = dict[str, Any]
EventCallback = Callable[[Event], None]
LineCallback = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """What to validate: the running environment, an image reference, or an image file."""

    kind: str  # "environment", "image", "sif" or "sqsh"
    ref: str | None = None
    recipe: str | None = None


@dataclass(frozen=True)
class Invocation:
    """How to start the runner: the launcher, the runner's own flags, host inputs."""

    launcher: str
    runner_args: tuple[str, ...]
    gpus: str = "none"
    inputs_dir: Path | None = None
    mount_checks: Path | None = None
    python: str = "python3"
    env: Mapping[str, str] = field(default_factory=dict)
    #: apptainer --rocm (host ROCm libraries over the image's): only where a site needs it.
    bind_host_rocm: bool = False


@dataclass(frozen=True)
class Outcome:
    report: dict[str, Any] | None
    exit_code: int
    report_path: Path | None = None
    script_path: Path | None = None
    output_tail: tuple[str, ...] = ()


def resolve_target(target: str | None, project: Path | None = None) -> Target:
    """No target: this environment. A .sif or .sqsh file: that file. A recipe name or
    file: its latest build (imagebuild.engine.tags). Anything else: an image reference."""
    if not target:
        return Target("environment")
    if target.endswith(".sif"):
        return Target("sif", str(Path(target).resolve()))
    if target.endswith((".sqsh", ".squashfs")):
        return Target("sqsh", str(Path(target).resolve()))
    from imagebuild.engine.tags import resolve_target as resolve_image

    resolved = resolve_image(target, project)
    return Target("image", resolved.image, recipe=resolved.recipe.name if resolved.recipe else None)


def detect_gpu_kind(dev: Path = Path("/dev"), proc: Path = Path("/proc")) -> str:
    if (dev / "kfd").exists():
        return "rocm"
    if (dev / "nvidiactl").exists() or (proc / "driver" / "nvidia").exists():
        return "nvidia"
    return "none"


def passthrough_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items()
            if k.startswith(PASS_ENV_PREFIXES) or k in PASS_ENV_NAMES}


def runner_command(python: str, runner_args: Sequence[str]) -> list[str]:
    return [python, "-m", IMAGE_PACKAGE, *runner_args, "--events", "--report", "-"]


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


# ----------------------------------------------------------------------------------
# Event stream
# ----------------------------------------------------------------------------------

class EventStream:
    """Splits a byte/text stream into lines; event lines go to ``on_event``, others to
    ``on_line``. Remembers the report event and the last lines of other output."""

    def __init__(self, on_event: EventCallback | None = None, on_line: LineCallback | None = None,
                 keep: int = 40):
        self.on_event = on_event
        self.on_line = on_line
        self.report: dict[str, Any] | None = None
        self.tail: list[str] = []
        self._keep = keep
        self._buffer = ""

    def feed(self, chunk: bytes | str) -> None:
        text = chunk.decode(errors="replace") if isinstance(chunk, bytes) else chunk
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self.line(line)

    def close(self) -> None:
        if self._buffer:
            self.line(self._buffer)
            self._buffer = ""

    def line(self, line: str) -> None:
        line = line.rstrip("\r")
        if line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except ValueError:
                event = None
            if isinstance(event, dict):
                if event.get("event") == "report":
                    self.report = event.get("report")
                if self.on_event:
                    self.on_event(event)
                return
        self.tail = (self.tail + [line])[-self._keep:]
        if self.on_line:
            self.on_line(line)


# ----------------------------------------------------------------------------------
# Launchers
# ----------------------------------------------------------------------------------

def _stream_command(argv: Sequence[str], stream: EventStream, env: Mapping[str, str] | None,
                    runner: Any = None) -> int:
    from imagebuild.engine.runner import CommandRunner

    runner = runner or CommandRunner()
    result = runner.run(argv, env=env, on_line=stream.line, keep_lines=1)
    return result.returncode


def run_local(invocation: Invocation, stream: EventStream, runner: Any = None) -> int:
    argv = [sys.executable, "-m", "imagebuild.validate.checks", *invocation.runner_args,
            "--events", "--report", "-"]
    env = dict(os.environ)
    env.update(invocation.env)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return _stream_command(argv, stream, env, runner)


def docker_run_kwargs(target: Target, invocation: Invocation,
                      dev: Path = Path("/dev")) -> dict[str, Any]:
    """Keyword arguments for docker SDK ``containers.run`` (unit-tested without a daemon)."""
    environment = {**invocation.env, "PYTHONPATH": IMAGE_LIB}
    kwargs: dict[str, Any] = {
        "image": target.ref,
        "entrypoint": [invocation.python, "-m", IMAGE_PACKAGE],
        "command": [*invocation.runner_args, "--events", "--report", "-"],
        "environment": environment,
        # Host network: NCCL/gloo rendezvous and RDMA NICs as on the host. Host IPC: NCCL
        # and RCCL use /dev/shm between ranks; docker's default 64 MB is too small.
        "network_mode": "host",
        "ipc_mode": "host",
        "detach": True,
        "volumes": {},
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
    if invocation.inputs_dir:
        kwargs["volumes"][str(invocation.inputs_dir)] = {"bind": CONTAINER_INPUTS, "mode": "ro"}
    if invocation.mount_checks:
        kwargs["volumes"][str(invocation.mount_checks)] = {"bind": IMAGE_LIB, "mode": "ro"}
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


def podman_argv(target: Target, invocation: Invocation, binary: str = "podman") -> list[str]:
    # This process's own limits: rootful podman's defaults need CAP_SYS_RESOURCE, which
    # sandboxed hosts lack (the container then never starts); a validation run needs no more.
    argv = [binary, "run", "--rm", "--network", "host", "--ipc", "host",
            *inherited_ulimits(), "--entrypoint", invocation.python]
    if invocation.gpus == "rocm":
        argv += ["--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "keep-groups",
                 "--security-opt", "seccomp=unconfined", "--cap-add", "SYS_PTRACE"]
    elif invocation.gpus == "nvidia":
        argv += ["--device", "nvidia.com/gpu=all"]  # CDI, podman's NVIDIA route
    for key, value in sorted({**invocation.env, "PYTHONPATH": IMAGE_LIB}.items()):
        argv += ["--env", f"{key}={value}"]
    if invocation.inputs_dir:
        argv += ["--volume", f"{invocation.inputs_dir}:{CONTAINER_INPUTS}:ro"]
    if invocation.mount_checks:
        argv += ["--volume", f"{invocation.mount_checks}:{IMAGE_LIB}:ro"]
    return argv + [str(target.ref), "-m", IMAGE_PACKAGE, *invocation.runner_args,
                   "--events", "--report", "-"]


def apptainer_binary(which: Callable[[str], str | None] = shutil.which) -> str:
    """apptainer, or singularity on hosts that have only that (same CLI for ``exec``)."""
    if which("apptainer") or not which("singularity"):
        return "apptainer"
    return "singularity"


def apptainer_argv(target: Target, invocation: Invocation, binary: str | None = None
                   ) -> list[str]:
    argv = [binary or apptainer_binary(), "exec"]
    # apptainer mounts the host's /dev, so /dev/kfd and /dev/dri are there without --rocm;
    # --rocm would bind the host's ROCm libraries over the ones the image's torch was built
    # against. --nv is needed: an image carries no NVIDIA driver libraries.
    if invocation.gpus == "rocm" and invocation.bind_host_rocm:
        argv.append("--rocm")
    elif invocation.gpus == "nvidia":
        argv.append("--nv")
    for key, value in sorted({**invocation.env, "PYTHONPATH": IMAGE_LIB}.items()):
        argv += ["--env", f"{key}={value}"]
    if invocation.inputs_dir:
        argv += ["--bind", f"{invocation.inputs_dir}:{CONTAINER_INPUTS}:ro"]
    if invocation.mount_checks:
        argv += ["--bind", f"{invocation.mount_checks}:{IMAGE_LIB}:ro"]
    return argv + [str(target.ref), *runner_command(invocation.python, invocation.runner_args)]


def enroot_argvs(target: Target, invocation: Invocation, name: str,
                 binary: str = "enroot") -> tuple[list[str], list[str], list[str]]:
    """(create, start, remove) command lines; enroot passes host GPUs through its hooks."""
    start = [binary, "start"]
    for key, value in sorted({**invocation.env, "PYTHONPATH": IMAGE_LIB}.items()):
        start += ["--env", f"{key}={value}"]
    if invocation.inputs_dir:
        start += ["--mount", f"{invocation.inputs_dir}:{CONTAINER_INPUTS}"]
    if invocation.mount_checks:
        start += ["--mount", f"{invocation.mount_checks}:{IMAGE_LIB}"]
    start += [name, *runner_command(invocation.python, invocation.runner_args)]
    return ([binary, "create", "--force", "--name", name, str(target.ref)], start,
            [binary, "remove", "--force", name])


# ----------------------------------------------------------------------------------
# Orchestration
# ----------------------------------------------------------------------------------

def choose_launcher(target: Target, requested: str, which: Callable[[str], str | None]) -> str:
    if requested != "auto":
        return requested
    if target.kind == "environment":
        return "local"
    if target.kind == "sif":
        if which("apptainer") or which("singularity"):
            return "apptainer"
        raise ValidateError(f"{target.ref}: a .sif needs apptainer (or singularity) on PATH")
    if target.kind == "sqsh":
        if which("enroot"):
            return "enroot"
        raise ValidateError(f"{target.ref}: a squashfs image needs enroot on PATH")
    if _docker_reachable():
        return "docker"
    if which("podman"):
        return "podman"
    raise ValidateError(f"cannot run image {target.ref}: no reachable docker engine and no "
                        "podman; pass --launcher")


def _docker_reachable() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:  # noqa: BLE001 - no SDK, no socket, no daemon: all mean "not docker"
        return False


def validate(target: Target, invocation: Invocation, *, report_path: Path | None,
             on_event: EventCallback | None = None, on_line: LineCallback | None = None,
             sbatch: SbatchSpec | None = None, script_dir: Path = Path("."),
             docker_client: Any = None, runner: Any = None) -> Outcome:
    """Run the checks as ``invocation`` says and write the report; never prints."""
    if invocation.launcher == "sbatch":
        name = f"imagebuild-validate-{utc_now().strftime('%Y%m%dT%H%M%SZ')}.sbatch"
        path = write_sbatch(target, invocation, sbatch or SbatchSpec(), script_dir / name)
        return Outcome(None, 0, script_path=path)
    stream = EventStream(on_event, on_line)
    launcher = invocation.launcher
    if launcher == "local":
        code = run_local(invocation, stream, runner)
    elif launcher == "docker":
        code = run_docker(target, invocation, stream, docker_client)
    elif launcher == "podman":
        code = _stream_command(podman_argv(target, invocation), stream, None, runner)
    elif launcher == "apptainer":
        code = _stream_command(apptainer_argv(target, invocation), stream, None, runner)
    elif launcher == "enroot":
        name = f"imagebuild-validate-{os.getpid()}"
        create, start, remove = enroot_argvs(target, invocation, name)
        if _stream_command(create, stream, None, runner) != 0:
            raise EngineError(f"enroot create {target.ref} failed: "
                              + (stream.tail[-1] if stream.tail else "no output"))
        try:
            code = _stream_command(start, stream, None, runner)
        finally:
            _stream_command(remove, EventStream(), None, runner)
    else:
        raise ValidateError(f"unknown launcher {launcher!r}; choose from {', '.join(LAUNCHERS)}")
    stream.close()
    report = stream.report
    if report is None:
        detail = "\n".join(stream.tail[-15:])
        raise ValidateError(f"the checks ended (exit {code}) without a report; last output:\n"
                            f"{detail}" if detail else
                            f"the checks ended (exit {code}) without a report and no output")
    report["runtime"] = launcher
    if target.ref and not report.get("image"):
        report["image"] = target.ref
    if target.recipe and not report.get("recipe"):
        report["recipe"] = target.recipe
    path = report_path or default_report_path(report.get("host") or socket.gethostname(),
                                              utc_now())
    write_json(report, path)
    return Outcome(report, code, report_path=path, output_tail=tuple(stream.tail))


def write_json(data: Mapping[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def prepare_inputs(thresholds: Mapping[str, Any] | None, container: bool) -> tuple[Path | None, list[str]]:
    """Write converted thresholds to a temporary directory; return it and the runner flags
    that point at it (inside a container: its mount point)."""
    if not thresholds:
        return None, []
    directory = Path(tempfile.mkdtemp(prefix="imagebuild-validate-inputs-"))
    (directory / "thresholds.json").write_text(json.dumps(thresholds, indent=2))
    directory.chmod(0o755)
    (directory / "thresholds.json").chmod(0o644)
    where = CONTAINER_INPUTS if container else str(directory)
    return directory, ["--thresholds", f"{where}/thresholds.json"]


def staged_checks() -> Path:
    """The host's checks staged for bind-mounting (--mount-checks)."""
    return stage(Path(tempfile.mkdtemp(prefix="imagebuild-validate-checks-")))


def iter_runner_flags(values: Mapping[str, Any], actions: Iterable[Any]) -> list[str]:
    """Flags re-created from parsed values, for the runner's own parser ``actions``."""
    argv: list[str] = []
    for action in actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = values.get(action.dest, action.default)
        if value is None or value == action.default:
            continue
        flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") \
            else action.option_strings[0]
        if action.nargs == 0:
            if value:
                argv.append(flag)
        elif isinstance(value, list):
            argv += [flag, ",".join(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv
