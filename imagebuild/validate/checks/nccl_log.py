"""What NCCL/RCCL's NCCL_DEBUG=INFO log says about the network it chose.

Lines look like ``nid001:4242:4242 [0] NCCL INFO Using network AWS Libfabric`` (RCCL
prints the same "NCCL INFO" prefix). What matters:
- "Using network <name>": the network transport in use; "Socket" on a multi-node job
  means the RDMA plugin did not load and traffic fell back to TCP;
- "NET/Plugin ..." lines: whether the net plugin (librccl-net.so, libnccl-net.so) loaded;
- "NET/OFI ..." lines: the aws-ofi-nccl/aws-ofi-rccl plugin is active (provider, version);
- "Channel ... via <transport>": P2P/IPC, SHM or NET/<name> between ranks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_VERSION = re.compile(r"NCCL INFO (?:cudaDriverVersion \d+\s*)?((?:NCCL|RCCL) version[ :]+\S+)")
_PLUGIN_LOADED = re.compile(r"NET/Plugin\s*:?\s*Loaded (?:net plugin|plugin)\s+(.+?)\s*$")
_PLUGIN_FAILED = re.compile(
    r"NET/Plugin.*(No plugin found|Could not find|dlerror|load returned|Failed to|failed)",
    re.IGNORECASE)
_OFI = re.compile(r"NCCL INFO NET/OFI (.+?)\s*$")
_VIA = re.compile(r"\bvia (.+?)\s*$")  # network names contain spaces: "NET/AWS Libfabric/0"
_NET_DEVICE = re.compile(r"NCCL INFO NET/(\w+)\s*: Using (.+?)\s*$")


@dataclass
class NcclLogSummary:
    networks: list[str] = field(default_factory=list)
    version: str | None = None
    plugin_loaded: str | None = None
    plugin_errors: list[str] = field(default_factory=list)
    ofi: list[str] = field(default_factory=list)
    transports: list[str] = field(default_factory=list)
    net_devices: list[str] = field(default_factory=list)
    lines: int = 0

    @property
    def network(self) -> str | None:
        return self.networks[0] if self.networks else None

    @property
    def fell_back_to_socket(self) -> bool:
        return any(name.lower() == "socket" for name in self.networks)

    def to_dict(self) -> dict[str, object]:
        return {"network": self.network, "networks": self.networks, "version": self.version,
                "plugin_loaded": self.plugin_loaded, "plugin_errors": self.plugin_errors[:4],
                "ofi": self.ofi[:6], "transports": self.transports,
                "net_devices": self.net_devices[:4], "lines": self.lines}


def transport_kind(token: str) -> str:
    """'P2P/IPC' -> 'P2P', 'SHM/direct/direct' -> 'SHM', 'NET/AWS' -> 'NET/AWS'..."""
    parts = token.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}"
    return parts[0]


def parse(text: str) -> NcclLogSummary:
    summary = NcclLogSummary()

    def add(items: list[str], value: str) -> None:
        if value not in items:
            items.append(value)

    for raw in text.splitlines():
        line = raw.rstrip()
        if "NCCL" not in line and "RCCL" not in line:
            continue
        summary.lines += 1
        if match := _USING_NETWORK.search(line):
            add(summary.networks, match.group(1))
        if summary.version is None and (match := _VERSION.search(line)):
            summary.version = match.group(1)
        if "NET/Plugin" in line:
            if match := _PLUGIN_LOADED.search(line):
                summary.plugin_loaded = match.group(1)
            elif _PLUGIN_FAILED.search(line):
                add(summary.plugin_errors, line.split("NCCL INFO", 1)[-1].strip())
        if match := _OFI.search(line):
            add(summary.ofi, match.group(1))
        if " Channel " in line and (match := _VIA.search(line)):
            add(summary.transports, transport_kind(match.group(1)))
        if (match := _NET_DEVICE.search(line)) and match.group(1) not in ("Plugin", "OFI"):
            add(summary.net_devices, f"{match.group(1)}: {match.group(2)}")
    return summary
