"""What ``imagebuild validate --site X`` takes from the site profile: launch defaults and
what the checks should expect.

Precedence, value by value: an explicit command-line flag, then the site profile, then
the built-in default. Each resolved value remembers where it came from, so the terminal
can say "cpu-bind mask_cpu:... (site lumi)". The checks are told what to expect (the
network check's libfabric provider, the affinity check's binding) from the same values
the launcher uses, so they judge against the site's expectations.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from imagebuild.recipe.image_network import ImageNetwork
from imagebuild.recipe.site import SiteProfile
from imagebuild.recipe.site_runtime import (
    Bind,
    loader_dir,
    single_node_srun,
    site_binds,
    site_env,
)

#: Built-in defaults when neither a flag nor the site says (launch_sbatch documents why).
DEFAULTS: dict[str, Any] = {"gpus_per_node": 8, "cpu_bind": "cores", "gpu_select": "local-id",
                            "bind_host_rocm": False, "exclusive": False}
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class Resolved:
    """One value and where it came from: "flag", "site <name>" or "default"."""

    value: Any
    source: str


@dataclass(frozen=True)
class SiteDefaults:
    gpus_per_node: Resolved
    cpus_per_task: Resolved
    cpu_bind: Resolved
    gpu_select: Resolved
    distribution: Resolved
    exclusive: Resolved
    socket_ifname: Resolved
    bind_host_rocm: Resolved
    expect_net_provider: Resolved
    #: The site's container environment (${VAR} references kept), binds and loader path.
    env: Mapping[str, str] = field(default_factory=dict)
    binds: tuple[Bind, ...] = ()
    library_dir: str | None = None
    site: str | None = None
    #: srun options the site needs for single-node jobs with this image's ROCm.
    single_node_srun: tuple[str, ...] = ()

    def expect_binding(self, launcher: str) -> bool:
        """Whether the checks should fail a rank left on every core: only where this
        launcher binds ranks itself (srun --cpu-bind in the sbatch job)."""
        return launcher == "sbatch" and self.cpu_bind.value != "none"

    def described(self) -> list[str]:
        """"name value (source)" for each value the site set, for the terminal."""
        names = ("gpus_per_node", "cpus_per_task", "cpu_bind", "distribution", "exclusive",
                 "gpu_select", "socket_ifname", "bind_host_rocm", "expect_net_provider")
        return [f"{name.replace('_', '-')} {getattr(self, name).value} "
                f"({getattr(self, name).source})" for name in names
                if getattr(self, name).source.startswith("site")]


def resolve(flags: Mapping[str, Any], site: SiteProfile | None,
            network: ImageNetwork | None = None) -> SiteDefaults:
    """Launch values from the command line (``None``: not given) and the site profile;
    the site's environment fitted to ``network``, what the image carries (None: unknown)."""
    where = f"site {site.name}" if site else "default"

    def pick(name: str, site_value: Any) -> Resolved:
        if flags.get(name) is not None:
            return Resolved(flags[name], "flag")
        if site_value is not None:
            return Resolved(site_value, where)
        return Resolved(DEFAULTS.get(name), "default")

    slurm = site.slurm if site else None
    return SiteDefaults(
        gpus_per_node=pick("gpus_per_node", slurm.gpus_per_node if slurm else None),
        cpus_per_task=pick("cpus_per_task", slurm.cpus_per_task if slurm else None),
        cpu_bind=pick("cpu_bind", slurm.cpu_bind if slurm else None),
        gpu_select=pick("gpu_select", slurm.gpu_select if slurm else None),
        distribution=pick("distribution", slurm.distribution if slurm else None),
        exclusive=pick("exclusive", slurm.exclusive if slurm else None),
        socket_ifname=pick("socket_ifname", site.network.socket_ifname if site else None),
        # A profile's false is its answer too: only an absent section leaves the default.
        bind_host_rocm=pick("bind_host_rocm", site.apptainer.bind_host_rocm if site else None),
        expect_net_provider=pick("expect_net_provider",
                                 site.network.provider if site else None),
        env=site_env(site, network),
        binds=site_binds(site),
        library_dir=loader_dir(site),
        site=site.name if site else None,
        single_node_srun=single_node_srun(site, network.rocm if network else None),
    )


def expand_refs(value: str, environ: Mapping[str, str]) -> str:
    """``${NAME}`` references replaced from ``environ`` (a launcher without a shell does
    what the Container Engine and the job's shell do); unknown ones are kept."""
    return _ENV_REF.sub(lambda m: environ.get(m.group(1), m.group(0)), value)


def present_binds(binds: tuple[Bind, ...], environ: Mapping[str, str],
                  exists: Callable[[str], bool] = os.path.exists
                  ) -> tuple[tuple[Bind, ...], list[str]]:
    """The binds whose host path exists here (references expanded), and a line for each
    one left out: the site's paths exist on its nodes, not on a workstation."""
    kept: list[Bind] = []
    skipped: list[str] = []
    for bind in binds:
        source = expand_refs(bind.source, environ)
        target = expand_refs(bind.target, environ)
        if "${" in source + target or not exists(source):
            skipped.append(f"site bind {bind.spec()} left out: {source} is not on this host")
            continue
        kept.append(Bind(source, target, bind.read_only))
    return tuple(kept), skipped
