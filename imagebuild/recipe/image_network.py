"""What an image carries for RCCL's network between nodes, and which networks it can load.

RCCL (like NCCL) initialises a network for every communicator, single-node ones included,
and fails when ``NCCL_NET`` names one that is not there ("NCCL_NET ... If the network with
the given name is not found, NCCL will fail": the NCCL_NET entry of
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-net). So a job's
environment may name only a network the image can load: the plugin's when the image
carries one (or the site's runtime injects one), RCCL's internal IB verbs transport when
the image has libibverbs with its providers, and its socket transport always.

The facts come from the image's plan (each component says what network plugin it installs,
``ComponentPlan.net_plugin``) and the recipe's OS packages; ``imagebuild.recipe.site_runtime``
turns them and the site profile into the job's network variables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: The name aws-ofi-nccl (and ROCm's aws-ofi-rccl fork) registers for RCCL (its
#: ncclNet_t "name": "AWS Libfabric"), the value CSCS's variables block sets.
PLUGIN_NETWORK = "AWS Libfabric"
#: RCCL's internal transports (NCCL_NET: "IB" or "Socket").
IB, SOCKET = "IB", "Socket"
#: OS packages RCCL's IB transport needs: libibverbs dlopens a provider library for the
#: HCA (mlx5, bnxt_re, irdma...) from ibverbs-providers; without it ibv_get_device_list
#: returns no device and RCCL finds no HCA (rdma-core's libibverbs/README.md, "Device
#: providers").
VERBS_PACKAGES = ("libibverbs1", "ibverbs-providers")
#: The environment prefixes only libfabric, its CXI provider and the plugin read.
LIBFABRIC_PREFIXES = ("FI_", "CXI_", "OFI_NCCL_")
_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class NetPlugin:
    """An RCCL network plugin an image carries."""

    kind: str
    #: Its path in the image (NCCL_NET_PLUGIN).
    library: str
    #: Its release (from the ref it is built from: v1.21.1 -> "1.21.1"); None when the ref
    #: names no release (a branch).
    release: str | None
    #: The libfabric release it is built against (the image's own).
    libfabric: str
    #: Providers of the image's own libfabric beyond its built-in ones (tcp, udp, shm...).
    providers: tuple[str, ...] = ()

    @property
    def release_tuple(self) -> tuple[int, int, int] | None:
        return release_tuple(self.release) if self.release else None


def release_tuple(text: str) -> tuple[int, int, int] | None:
    """``v1.21.1`` or ``1.21.1`` -> (1, 21, 1); None for anything else (a branch name)."""
    match = _RELEASE.match(text)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


@dataclass(frozen=True)
class ImageNetwork:
    """What an image offers RCCL for its network."""

    plugin: NetPlugin | None
    #: libibverbs and its providers are installed (RCCL's IB transport can find an HCA).
    verbs: bool
    #: The image's ROCm release (None: a CPU image): picks a site's settings by release.
    rocm: str | None = None

    def loadable(self, site_injects_plugin: bool = False) -> tuple[str, ...]:
        """The NCCL_NET values a job with this image can name."""
        names = [SOCKET]
        if self.verbs:
            names.insert(0, IB)
        if self.plugin is not None or site_injects_plugin:
            names.insert(0, PLUGIN_NETWORK)
        return tuple(names)

    def said(self) -> str:
        """One line for a header: what the image carries."""
        plugin = (f"{self.plugin.kind} {self.plugin.release or '(unreleased ref)'} on "
                  f"libfabric {self.plugin.libfabric}" if self.plugin else "no network plugin")
        return f"image network: {plugin}; IB verbs {'yes' if self.verbs else 'no'}"


def has_verbs(packages: Iterable[str]) -> bool:
    """Whether OS packages (``name`` or ``name=version``) give RCCL's IB transport a device."""
    names = {package.split("=", 1)[0] for package in packages}
    return all(name in names for name in VERBS_PACKAGES)


#: aws-ofi-nccl's first release whose tuner neither refuses nor crashes on NCCL_ALGO/
#: NCCL_PROTO and whose DMA-BUF detection works on ROCm 7.x (its 1.20.0 release notes:
#: "Fixed tuner segfault when NCCL_ALGO or NCCL_PROTO is explicitly set", "Fixed DMA-BUF
#: support detection and fd retrieval on ROCm 7.x (AMD MI300 and later), which previously
#: caused domain initialization failures", https://github.com/aws/aws-ofi-nccl/pull/1296;
#: the refusal of 1.16 was fixed in 1.17.0, https://github.com/aws/aws-ofi-nccl/issues/982).
PLUGIN_FLOOR = (1, 20, 0)
PLUGIN_FLOOR_KIND = "aws-ofi-nccl"
#: The variables that choose RCCL's protocol or algorithm.
PROTOCOL_VARIABLES = ("NCCL_PROTO", "NCCL_ALGO")


def below_floor(plugin: NetPlugin | None, *, variables: Iterable[str] = (),
                tuner: bool = False) -> str | None:
    """Why ``plugin`` may not be used with these variables or a tuner plugin in the same
    image, or None. Only upstream aws-ofi-nccl's history is known (ROCm's aws-ofi-rccl fork
    has its own); a plugin built from a branch has no release to judge."""
    if plugin is None or plugin.kind != PLUGIN_FLOOR_KIND or plugin.release_tuple is None:
        return None
    if plugin.release_tuple >= PLUGIN_FLOOR:
        return None
    set_here = sorted(set(variables) & set(PROTOCOL_VARIABLES))
    if not set_here and not tuner:
        return None
    what = " and ".join(([", ".join(set_here) + " set"] if set_here else [])
                        + (["a tuner plugin in the image"] if tuner else []))
    return (f"{plugin.kind} {plugin.release} with {what}: before 1.20.0 its tuner crashes when "
            "NCCL_ALGO or NCCL_PROTO is set, and its DMA-BUF detection fails on ROCm 7.x on "
            "MI300 and later (aws-ofi-nccl 1.20.0 release notes)")
