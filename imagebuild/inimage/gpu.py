"""Facts about the GPU a rank uses, the same way on ROCm and CUDA builds of torch.

torch.cuda.* is the HIP API on ROCm builds; ``torch.version.hip`` tells them apart. The
architecture is gcnArchName's base on ROCm ('gfx942:sramecc+:xnack-' -> 'gfx942') and
'sm_<major><minor>' on CUDA. PCI location comes from the device properties where this
torch exposes it (pci_domain_id/pci_bus_id/pci_device_id), for the NUMA lookup in /sys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    vendor: str
    arch: str
    memory_gib: float
    pci_bus_id: str | None
    uuid: str | None
    multiprocessors: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def vendor() -> str:
    return "amd" if getattr(torch.version, "hip", None) else "nvidia"


def arch_of(props: Any) -> str:
    gcn = getattr(props, "gcnArchName", "") or ""
    if torch.version.hip and gcn:
        return gcn.split(":")[0]
    return f"sm_{props.major}{props.minor}"


def pci_address(props: Any) -> str | None:
    bus = getattr(props, "pci_bus_id", None)
    device = getattr(props, "pci_device_id", None)
    if bus is None or device is None:
        return None
    domain = getattr(props, "pci_domain_id", 0) or 0
    # sysfs spells it lower-case hex, function 0: /sys/bus/pci/devices/0000:c1:00.0
    return f"{int(domain):04x}:{int(bus):02x}:{int(device):02x}.0"


def describe(index: int) -> DeviceInfo:
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    return DeviceInfo(
        index=index,
        name=torch.cuda.get_device_name(index),
        vendor=vendor(),
        arch=arch_of(props),
        memory_gib=round(props.total_memory / 2**30, 2),
        pci_bus_id=pci_address(props),
        uuid=str(uuid) if uuid is not None else None,
        multiprocessors=int(getattr(props, "multi_processor_count", 0)),
    )


def arch_supported(arch: str, arch_list: list[str]) -> bool:
    """Whether this torch carries kernels for the device.

    ROCm wheels list gfx targets ('gfx90a', 'gfx942'); CUDA wheels list 'sm_XY' and
    'compute_XY' (PTX, which the driver can JIT for the same or a newer GPU).
    """
    if arch in arch_list:
        return True
    if arch.startswith("sm_"):
        try:
            mine = int(arch[3:].rstrip("a"))
        except ValueError:
            return False
        for entry in arch_list:
            if entry.startswith("compute_"):
                try:
                    if int(entry[8:].rstrip("a")) <= mine:
                        return True
                except ValueError:
                    continue
    return False
