"""How the in-image runner is started, whatever the launcher: its command line, the
environment and mounts a container gets, and host inputs staged for it.

Each launcher module (launch_local, launch_container for docker and podman,
launch_apptainer, launch_enroot, launch_sbatch) turns an ``Invocation`` into its own command
line or container with the helpers here, so every launcher passes the same environment, mounts and runner flags.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.recipe.site_runtime import Bind
from imagebuild.validate.stage_checks import IMAGE_LIB, IMAGE_PACKAGE, stage
from imagebuild.validate.target import Target

#: Host environment variables handed to the checks in a container: the ones that steer
#: RCCL/NCCL, libfabric and its CXI provider, HIP/CUDA device visibility and the
#: validation itself.
PASS_ENV_PREFIXES = ("NCCL_", "RCCL_", "FI_", "CXI_", "HSA_", "HIP_", "ROCR_", "MIOPEN_",
                     "PYTORCH_", "TORCH_", "IMAGEBUILD_MANIFEST", "GLOO_")
PASS_ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")

#: Where host-side inputs (converted thresholds) appear inside a container.
CONTAINER_INPUTS = "/imagebuild-inputs"

#: Puts a directory first on the loader path inside the container, after the image's own
#: environment applies (a runtime's --env would replace the image's LD_LIBRARY_PATH, not
#: extend it). The directory is $0, so no quoting of it is needed; a ``*`` component in it
#: is the newest release the node has (``sort -V``, as inimage/library_dirs.py orders).
LOADER_PREFIX_SCRIPT = ('d=$(ls -d $0 2>/dev/null | sort -V | tail -n 1); '
                        'export LD_LIBRARY_PATH="${d:-$0}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; '
                        'exec "$@"')


#: Launchers whose checks run in a container (host paths must be bound in).
CONTAINER_LAUNCHERS = ("docker", "podman", "apptainer", "enroot")


def runs_in_container(launcher: str, target: Target) -> bool:
    """Whether the checks see the container's filesystem: a container launcher, or sbatch
    with an image (apptainer or an EDF in the script), not sbatch of this environment."""
    return launcher in CONTAINER_LAUNCHERS or (
        launcher == "sbatch" and target.kind != "environment")


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
    #: Host paths the site's runtime binds into containers (its libfabric, libcxi...).
    binds: tuple[Bind, ...] = ()
    #: A directory (inside the container) put first on LD_LIBRARY_PATH: the site-bound
    #: libfabric, ahead of the image's own.
    library_dir: str | None = None


def passthrough_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items()
            if k.startswith(PASS_ENV_PREFIXES) or k in PASS_ENV_NAMES}


def runner_command(python: str, runner_args: Sequence[str]) -> list[str]:
    return [python, "-m", IMAGE_PACKAGE, *runner_args, "--events", "--report", "-"]


def container_command(invocation: Invocation) -> list[str]:
    """The runner's command line inside a container, behind the loader-path prefix when
    the site binds a libfabric directory."""
    command = runner_command(invocation.python, invocation.runner_args)
    if invocation.library_dir:
        return ["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, invocation.library_dir, *command]
    return command


def container_env(invocation: Invocation) -> dict[str, str]:
    """The environment a container gets: the invocation's, and the checks on PYTHONPATH."""
    return {**invocation.env, "PYTHONPATH": IMAGE_LIB}


def container_mounts(invocation: Invocation) -> list[Bind]:
    """Every bind a container gets: the site's, the host inputs, this checkout's checks."""
    mounts = list(invocation.binds)
    if invocation.inputs_dir:
        mounts.append(Bind(str(invocation.inputs_dir), CONTAINER_INPUTS, read_only=True))
    if invocation.mount_checks:
        mounts.append(Bind(str(invocation.mount_checks), IMAGE_LIB, read_only=True))
    return mounts


def prepare_inputs(thresholds: Mapping[str, Any] | None, container: bool,
                   references: Mapping[str, Any] | None = None) -> tuple[Path | None, list[str]]:
    """Write converted thresholds and references to a temporary directory; return it and
    the runner flags that point at it (inside a container: its mount point)."""
    inputs = {name: data for name, data in (("thresholds", thresholds),
                                            ("references", references)) if data}
    if not inputs:
        return None, []
    directory = Path(tempfile.mkdtemp(prefix="imagebuild-validate-inputs-"))
    directory.chmod(0o755)
    where = CONTAINER_INPUTS if container else str(directory)
    flags: list[str] = []
    for name, data in inputs.items():
        (directory / f"{name}.json").write_text(json.dumps(data, indent=2))
        (directory / f"{name}.json").chmod(0o644)
        flags += [f"--{name}", f"{where}/{name}.json"]
    return directory, flags


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
