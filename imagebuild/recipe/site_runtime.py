"""What a site profile asks of every container runtime and launcher, in one place.

The site profile (imagebuild.recipe.site) holds the facts; these functions turn them into
what the launchers need, so the EDF (imagebuild.render.edf), the apptainer/docker/podman/
enroot command lines and the sbatch script (imagebuild.validate) apply the same binds,
environment and loader path:

- binds: host paths bound into the container (``container.binds``), e.g. LUMI's Cray
  libfabric under /opt/cray and libcxi;
- environment: ``container.env`` plus NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME from
  ``network.socket_ifname``;
- loader path: a site-bound libfabric's directory (``libfabric.library_dir``) first on
  LD_LIBRARY_PATH, ahead of the image's own libfabric (which the image registers with the
  loader cache only, so LD_LIBRARY_PATH wins).

The grammars of the launch values a profile may set (CPU binding, GPU selection, socket
interfaces) are here too: the site profile and the command line check them the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagebuild.errors import RenderError
from imagebuild.recipe.image_network import (
    LIBFABRIC_PREFIXES,
    PLUGIN_NETWORK,
    ImageNetwork,
    below_floor,
)

if TYPE_CHECKING:
    from imagebuild.recipe.site import SiteProfile

#: srun --cpu-bind values: a binding type, or one mask/map entry per local rank (as LUMI
#: documents for its MI250X nodes: https://docs.lumi-supercomputer.eu/runjobs/scheduled-jobs/lumig-job/).
CPU_BIND = re.compile(r"^(cores|threads|sockets|ldoms|rank|none|"
                      r"(mask_cpu|map_cpu|mask_ldom|map_ldom):[0-9A-Fa-fx,*]+)$")
#: How each rank gets its GPU: ``local-id`` (ROCR/CUDA_VISIBLE_DEVICES=SLURM_LOCALID) or
#: ``closest`` (srun --gpus-per-task=1 --gpu-bind=closest).
GPU_SELECTIONS = ("local-id", "closest")
#: NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME: interface names separated by commas.
IFNAME = re.compile(r"^[A-Za-z0-9_.:^-]+(,[A-Za-z0-9_.:^-]+)*$")
#: A libfabric provider name as FI_PROVIDER and aws-ofi-nccl's log spell it (cxi, tcp...).
PROVIDER = re.compile(r"^[a-z][a-z0-9_]*$")
#: Who gives RCCL its network transport at a site (``network.plugin``):
#: ``image``: the image's own libfabric plugin (NCCL_NET_PLUGIN, set by the image), pinned to
#: ``network.provider`` with FI_PROVIDER; ``site``: the site runtime injects its own plugin
#: (the Container Engine's aws_ofi_nccl hook), and the EDF unsets the image's NCCL_NET_PLUGIN;
#: ``none``: RCCL's own InfiniBand/RoCE verbs transport (NCCL_NET=IB), the image's plugin
#: unused.
NET_PLUGINS = ("image", "site", "none")
#: srun --distribution: nodes, then sockets (block, cyclic, fcyclic, * for the default).
DISTRIBUTION = re.compile(r"^(\*|block|cyclic|arbitrary|plane=\d+)(:(\*|block|cyclic|fcyclic))?"
                          r"(:(\*|block|cyclic|fcyclic))?$")
#: One path of a bind: absolute, or starting with a ${VAR} the runtime expands; no spaces,
#: colons or commas (separators in bind lists).
_BIND_PATH = re.compile(r"^(/|\$\{[A-Za-z_][A-Za-z0-9_]*\})([A-Za-z0-9._+@/-]|\$\{[A-Za-z_][A-Za-z0-9_]*\})*$")
_ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


@dataclass(frozen=True)
class Bind:
    """A host path bound into a container: ``SRC[:DST[:ro]]`` in a profile."""

    source: str
    target: str
    read_only: bool = False

    def spec(self) -> str:
        """``SRC:DST[:ro]``: what EDF mounts, apptainer --bind and podman --volume take."""
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")

    @property
    def expands(self) -> bool:
        """True when a path holds a ${VAR} for the runtime (or the job's shell) to expand."""
        return bool(_ENV_REF.search(self.source) or _ENV_REF.search(self.target))


def parse_bind(text: str) -> Bind | str:
    """A bind from ``SRC[:DST[:ro]]``, or why the text is not one."""
    parts = text.split(":")
    if len(parts) > 3 or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        return f"{text!r}: expected SRC[:DST[:ro]] (one flag, ro or rw)"
    for path in parts[:2]:
        if not _BIND_PATH.match(path):
            return (f"{text!r}: {path!r} is not an absolute path (or ${{VAR}}/path); no "
                    "spaces, commas or colons")
    return Bind(parts[0], parts[1] if len(parts) > 1 else parts[0],
                read_only=len(parts) == 3 and parts[2] == "ro")


def site_binds(site: SiteProfile | None) -> tuple[Bind, ...]:
    return site.container.binds if site else ()


def site_env(site: SiteProfile | None, network: ImageNetwork | None = None,
             rocm: str | None = None) -> dict[str, str]:
    """The environment every runtime at the site gets (EDF-only entries excluded), fitted
    to what the image carries (``network``; None: an image of unknown content, the
    profile's settings as written) and its ROCm release (``network.rocm``, else ``rocm``)."""
    return fitted_env(site, network, rocm)[0]


def fitted_env(site: SiteProfile | None, network: ImageNetwork | None = None,
               rocm: str | None = None) -> tuple[dict[str, str], tuple[str, ...]]:
    """``site_env`` and the profile's variables left out because the image cannot honour
    them (see ``network_fit``)."""
    if site is None:
        return {}, ()
    rocm = network.rocm if network is not None and network.rocm else rocm
    refuse_too_new(site, rocm)
    env = {**plugin_env(site, network), **dict(site.container.env)}  # the profile's own win
    for entry in site.rocm.entries_for(rocm):  # the settings for this ROCm release win
        env.update(entry.env)
    if site.network.socket_ifname:
        # Bootstrap and rendezvous sockets on the high-speed interfaces. Without
        # GLOO_SOCKET_IFNAME gloo uses the address the host name resolves to, which fails
        # on large jobs.
        env.setdefault("NCCL_SOCKET_IFNAME", site.network.socket_ifname)
        env.setdefault("GLOO_SOCKET_IFNAME", site.network.socket_ifname)
    left_out = network_fit(site, network, env)
    return {k: v for k, v in env.items() if k not in left_out}, left_out


def refuse_too_new(site: SiteProfile, rocm: str | None, where: str = "") -> None:
    """RenderError when the image's ROCm is newer than the site's driver runs
    (``rocm.newest``): such an image fails on the first GPU call there, or worse, runs."""
    if site.rocm.too_new(rocm):
        raise RenderError(
            f"{where}site {site.name} runs ROCm up to {site.rocm.newest}, and the image has "
            f"ROCm {rocm}" + (f" ({site.rocm.newest_why})" if site.rocm.newest_why else ""),
            hint=f"use a recipe with ROCm {site.rocm.newest} or older for {site.name}, or "
                 "drop the site from the recipe's sites")


def single_node_srun(site: SiteProfile | None, rocm: str | None) -> tuple[str, ...]:
    """srun options the site needs for single-node jobs with an image of ``rocm``."""
    if site is None:
        return ()
    return tuple(o for e in site.rocm.entries_for(rocm) for o in e.single_node_srun)


def network_fit(site: SiteProfile, network: ImageNetwork | None,
                env: dict[str, str]) -> tuple[str, ...]:
    """The variables of ``env`` that name or tune a network the image cannot load, to be left
    out; RenderError when the profile's network itself needs what the image lacks.

    RCCL initialises a network for every communicator and fails when NCCL_NET names one it
    cannot load (imagebuild.recipe.image_network). Where the profile relies on the image's
    plugin (``network.plugin: image``) and the image carries none (the TheRock images),
    NCCL_NET and the libfabric/plugin variables (FI_*, CXI_*, OFI_NCCL_*: nothing in the
    image reads them) are left out: RCCL uses its socket transport between nodes."""
    if network is None:
        return ()
    plugin = site.network.plugin
    if plugin == "none" and not network.verbs:
        raise RenderError(
            f"site {site.name}: network.plugin: none runs RCCL over its IB verbs transport "
            "(NCCL_NET=IB), but the image has no verbs provider (it needs the OS packages "
            "libibverbs1 and ibverbs-providers): RCCL would find no HCA",
            hint="add ibverbs-providers (and libibverbs1) to the recipe's os_packages, or "
                 "use another site profile")
    own_stack = site.libfabric is not None and site.libfabric.provided_by == "image"
    provider = site.network.provider
    if own_stack and provider and network.plugin is not None \
            and provider not in network.plugin.providers:
        raise RenderError(
            f"site {site.name} ({site.source}) runs RCCL's plugin on the image's own libfabric "
            f"(libfabric.provided_by: image) with provider {provider}, but the image's "
            f"libfabric {network.plugin.libfabric} has only the built-in providers: the plugin "
            "would find no fabric",
            hint="build the image with the cxi_stack section (libfabric with HPE's cxi "
                 "provider), or use a profile whose runtime binds the site's libfabric")
    dropped: list[str] = []
    if plugin == "image" and network.plugin is None:
        dropped = [key for key in env
                   if key == "NCCL_NET" or key.startswith(LIBFABRIC_PREFIXES)]
    wanted = env.get("NCCL_NET")
    if wanted is not None and "NCCL_NET" not in dropped \
            and wanted not in network.loadable(site_injects_plugin=plugin == "site"):
        raise RenderError(
            f"{site.source}: NCCL_NET={wanted!r}, but the image can load only "
            f"{', '.join(network.loadable(plugin == 'site'))} ({network.said()}); RCCL "
            "fails at the first communicator when the named network is absent",
            hint=f"set NCCL_NET to one of those, or build the image with what "
                 f"{wanted!r} needs" + (f" (a network plugin for {PLUGIN_NETWORK!r})"
                                         if wanted == PLUGIN_NETWORK else ""))
    why = below_floor(network.plugin, variables=[k for k in env if k not in dropped])
    if why:
        raise RenderError(f"site {site.name} ({site.source}): {why}",
                          hint="rebuild the image with aws-ofi-nccl v1.20.0 or newer (v1.21.1)")
    return tuple(sorted(dropped))


def plugin_env(site: SiteProfile | None, network: ImageNetwork | None = None
               ) -> dict[str, str]:
    """What makes RCCL use the network the profile chose (``network.plugin``), for every
    runtime. ``image``: FI_PROVIDER pins libfabric to the site's provider. The image's own
    libfabric has only its built-in providers (tcp, udp, shm...) and aws-ofi-nccl accepts tcp
    (its provider filter drops only the interfaces in OFI_NCCL_EXCLUDE_TCP_IF, "lo,docker0"
    by default: include/nccl_ofi_param.h), so without the pin a job whose host libfabric
    was not bound runs the plugin over TCP; with it, fi_getinfo finds no provider and the
    plugin fails to start (FI_PROVIDER: "a comma separated list of providers to include",
    the libfabric(7) man page, https://ofiwg.github.io/libfabric/v1.22.0/man/fabric.7.html).
    An image without a plugin gets no pin (nothing in it reads FI_PROVIDER).
    ``none``: NCCL_NET=IB selects RCCL's internal IB verbs transport (InfiniBand and RoCE)
    even where the image's plugin loads (NCCL_NET: "IB" or "Socket" for the internal
    networks, https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net).
    ``site``: nothing here; the EDF enables the site's hook (imagebuild.render.edf)."""
    if site is None:
        return {}
    if site.network.plugin == "image" and site.network.provider:
        if network is not None and network.plugin is None:
            return {}
        return {"FI_PROVIDER": site.network.provider}
    if site.network.plugin == "none":
        return {"NCCL_NET": "IB"}
    return {}


def loader_dir(site: SiteProfile | None) -> str | None:
    """The site-bound libfabric directory to put first on LD_LIBRARY_PATH, if any."""
    if site is None or site.libfabric is None or site.libfabric.provided_by != "site":
        return None
    return site.libfabric.library_dir
