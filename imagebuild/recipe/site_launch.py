"""The site profile's launch sections: what containers, the network and SLURM jobs look like
at a site, parsed and checked with the profile (imagebuild.recipe.site).

    container:            every runtime (EDF, apptainer/singularity, the sbatch script)
      binds: [SRC[:DST[:ro]], ...]
      env: {NAME: "value"}
    network:
      socket_ifname: "hsn0,hsn1"   NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME
      provider: cxi                the libfabric provider RCCL's plugin must select
      plugin: image | site | none  who gives RCCL its network (site_runtime.NET_PLUGINS)
    slurm:                         defaults of imagebuild validate --launcher sbatch
      gpus_per_node: 8
      cpus_per_task: 7
      cpu_bind: cores | mask_cpu:M0,M1,...
      distribution: block:block    srun --distribution (tasks to nodes, then to sockets)
      exclusive: true              #SBATCH --exclusive (whole nodes, where binding is valid)
      gpu_select: local-id | closest
    apptainer:
      bind_host_rocm: false        apptainer --rocm (host ROCm over the image's)

Every value is optional; an explicit command-line flag wins over the profile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagebuild.recipe.site_runtime import (
    CPU_BIND,
    DISTRIBUTION,
    GPU_SELECTIONS,
    IFNAME,
    NET_PLUGINS,
    PROVIDER,
    Bind,
    parse_bind,
)

_ENV_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
#: Set by the image or by the launcher itself: a profile that set them would break the
#: image's Python or libraries (the site's libfabric directory goes in libfabric.library_dir).
_RESERVED_ENV = ("LD_LIBRARY_PATH", "PYTHONPATH", "PATH", "VIRTUAL_ENV")
_KEYS = {
    "container": {"binds", "env"},
    "network": {"socket_ifname", "provider", "plugin"},
    "slurm": {"gpus_per_node", "cpus_per_task", "cpu_bind", "distribution", "exclusive",
              "gpu_select"},
    "apptainer": {"bind_host_rocm"},
}

Report = Callable[[str, str], None]


@dataclass(frozen=True)
class ContainerSettings:
    binds: tuple[Bind, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NetworkSettings:
    socket_ifname: str | None = None
    #: libfabric provider the network check expects RCCL's plugin to select (cxi on
    #: HPE Slingshot); None: no expectation.
    provider: str | None = None
    #: Who gives RCCL its network: image (the default), site or none (NET_PLUGINS).
    plugin: str = "image"


@dataclass(frozen=True)
class SlurmSettings:
    gpus_per_node: int | None = None
    cpus_per_task: int | None = None
    cpu_bind: str | None = None
    gpu_select: str | None = None
    distribution: str | None = None
    #: Whole nodes for the job (#SBATCH --exclusive); None: the partition's default.
    exclusive: bool | None = None


@dataclass(frozen=True)
class ApptainerSettings:
    bind_host_rocm: bool = False


@dataclass(frozen=True)
class LaunchSettings:
    container: ContainerSettings
    network: NetworkSettings
    slurm: SlurmSettings
    apptainer: ApptainerSettings


def parse_launch_settings(raw: dict[str, Any], problem: Report,
                          library_dir: str | None = None) -> LaunchSettings:
    """The four sections of ``raw`` (the whole profile); each problem goes to ``problem``
    with its key path."""
    sections: dict[str, dict[str, Any]] = {}
    for name, keys in _KEYS.items():
        value = raw.get(name)
        if value is None:
            sections[name] = {}
        elif not isinstance(value, dict):
            problem(name, f"expected a mapping with {', '.join(sorted(keys))}")
            sections[name] = {}
        else:
            for key in sorted(set(value) - keys):
                problem(f"{name}.{key}", f"unknown key (expected one of {', '.join(sorted(keys))})")
            sections[name] = value
    return LaunchSettings(
        container=_container(sections["container"], problem, library_dir,
                             _edf_mount_targets(raw)),
        network=_network(sections["network"], problem),
        slurm=_slurm(sections["slurm"], problem),
        apptainer=_apptainer(sections["apptainer"], problem),
    )


def _container(raw: dict[str, Any], problem: Report, library_dir: str | None,
               edf_targets: list[str]) -> ContainerSettings:
    binds: list[Bind] = []
    value = raw.get("binds")
    if value is not None and (not isinstance(value, list)
                              or not all(isinstance(v, str) for v in value)):
        problem("container.binds", "expected a list of SRC[:DST[:ro]] strings")
    else:
        for text in value or []:
            bind = parse_bind(text)
            if isinstance(bind, str):
                problem("container.binds", bind)
            else:
                binds.append(bind)
    env: list[tuple[str, str]] = []
    value = raw.get("env")
    if value is not None and not isinstance(value, dict):
        problem("container.env", "expected a mapping of names to strings")
        value = {}
    for key, text in (value or {}).items():
        where = f"container.env.{key}"
        if not isinstance(key, str) or not key or key[0].isdigit() \
                or any(c not in _ENV_NAME_CHARS for c in key):
            problem(where, "not a valid environment variable name")
        elif key in _RESERVED_ENV:
            hint = (" (the site's libfabric directory: libfabric.library_dir)"
                    if key == "LD_LIBRARY_PATH" else "")
            problem(where, f"set by the image or the launcher, not by a site profile{hint}")
        elif not isinstance(text, str):
            problem(where, f"expected a string (quote it in YAML), got {text!r}")
        elif "\n" in text or "`" in text or "$(" in text:
            problem(where, "one line, no command substitution (${VAR} references are fine)")
        else:
            env.append((key, text))
    targets = [b.target for b in binds] + list(edf_targets)
    if library_dir and not any(library_dir == t or library_dir.startswith(t.rstrip("/") + "/")
                               for t in targets):
        problem("libfabric.library_dir",
                f"{library_dir} is not inside any container.binds (or edf.mounts) target: "
                "bind the site's libfabric into the container (e.g. /opt/cray)")
    return ContainerSettings(tuple(binds), tuple(sorted(env)))


def _edf_mount_targets(raw: dict[str, Any]) -> list[str]:
    edf = raw.get("edf")
    mounts = edf.get("mounts") if isinstance(edf, dict) else None
    if not isinstance(mounts, list):
        return []
    return [m.split(":")[1] for m in mounts if isinstance(m, str) and m.count(":") >= 1]


def _network(raw: dict[str, Any], problem: Report) -> NetworkSettings:
    ifname = raw.get("socket_ifname")
    if ifname is not None and (not isinstance(ifname, str) or not IFNAME.match(ifname)):
        problem("network.socket_ifname",
                f"expected interface names separated by commas (e.g. \"hsn0,hsn1\"), got {ifname!r}")
        ifname = None
    provider = raw.get("provider")
    if provider is not None and (not isinstance(provider, str) or not PROVIDER.match(provider)):
        problem("network.provider", f"expected a libfabric provider name like cxi, got {provider!r}")
        provider = None
    plugin = raw.get("plugin", "image")
    if plugin not in NET_PLUGINS:
        problem("network.plugin", f"expected one of {', '.join(NET_PLUGINS)}, got {plugin!r}")
        plugin = "image"
    return NetworkSettings(ifname, provider, plugin)


def _slurm(raw: dict[str, Any], problem: Report) -> SlurmSettings:
    counts: dict[str, int | None] = {}
    for key in ("gpus_per_node", "cpus_per_task"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            problem(f"slurm.{key}", f"expected an integer >= 1, got {value!r}")
            value = None
        counts[key] = value
    cpu_bind = raw.get("cpu_bind")
    if cpu_bind is not None and (not isinstance(cpu_bind, str) or not CPU_BIND.match(cpu_bind)):
        problem("slurm.cpu_bind", "expected cores, threads, sockets, none or "
                f"mask_cpu:MASK,MASK,... (one mask per local rank), got {cpu_bind!r}")
        cpu_bind = None
    gpu_select = raw.get("gpu_select")
    if gpu_select is not None and gpu_select not in GPU_SELECTIONS:
        problem("slurm.gpu_select",
                f"expected one of {', '.join(GPU_SELECTIONS)}, got {gpu_select!r}")
        gpu_select = None
    distribution = raw.get("distribution")
    if distribution is not None and (not isinstance(distribution, str)
                                     or not DISTRIBUTION.match(distribution)):
        problem("slurm.distribution", "expected srun --distribution values like block:block "
                f"or block:cyclic, got {distribution!r}")
        distribution = None
    exclusive = raw.get("exclusive")
    if exclusive is not None and not isinstance(exclusive, bool):
        problem("slurm.exclusive", f"expected true or false, got {exclusive!r}")
        exclusive = None
    return SlurmSettings(counts["gpus_per_node"], counts["cpus_per_task"], cpu_bind, gpu_select,
                         distribution, exclusive)


def _apptainer(raw: dict[str, Any], problem: Report) -> ApptainerSettings:
    value = raw.get("bind_host_rocm", False)
    if not isinstance(value, bool):
        problem("apptainer.bind_host_rocm", f"expected true or false, got {value!r}")
        value = False
    return ApptainerSettings(value)
