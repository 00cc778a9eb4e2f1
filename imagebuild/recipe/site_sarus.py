"""What a site profile says about Sarus Suite (Podman with the Skybox Slurm plugin), the
runtime replacing CSCS's Container Engine: the devices its EDFs list.

Under Sarus Suite an EDF keeps its format, but the image is a registry reference, mount
destinations are explicit, and HPC features come from CDI devices in a ``devices`` array,
not hook annotations (docs.cscs.ch, "Sarus Suite & Podman on Alps", Early Access User
Guide: https://github.com/eth-cscs/cscs-docs/blob/main/docs/software/container-engine/sarus-suite/user-guide.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imagebuild.recipe.fields import Obj, Seq, Str

#: A value for Podman's --device: a CDI name (vendor.com/class=name) or a device path.
DEVICE = r"^([a-z0-9.-]+\.[a-z]+/[a-z0-9_-]+=[A-Za-z0-9_.:-]+|/dev/[A-Za-z0-9_./-]+)$"

SPEC = Obj(nullable=True, fields={
    "devices": Seq(Str("a Podman --device value: a CDI device like amd.com/gpu=all or a "
                       "path like /dev/kfd", DEVICE), nullable=True),
    "libfabric_devices": Seq(Str("a CDI device that replaces the container's libfabric, "
                                 "like alps.cscs/cxi=all (listed only for images that carry "
                                 "a libfabric)", DEVICE), nullable=True),
})


@dataclass(frozen=True)
class SarusSuite:
    #: Devices every Sarus Suite EDF at the site lists.
    devices: tuple[str, ...] = ()
    #: Devices that replace the container's libfabric with the site's: Sarus Suite stops
    #: with an error when the image has none ("Enabling the CXI CDI with a container that
    #: does not have libfabric results in an error", same guide).
    libfabric_devices: tuple[str, ...] = ()


def parse_sarus(raw: Any) -> SarusSuite | None:
    """The ``sarus_suite:`` section, already checked against ``SPEC``; None when absent."""
    if not isinstance(raw, dict):
        return None
    return SarusSuite(devices=tuple(raw.get("devices") or ()),
                      libfabric_devices=tuple(raw.get("libfabric_devices") or ()))
