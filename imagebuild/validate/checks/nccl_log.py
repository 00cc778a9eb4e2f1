"""What NCCL/RCCL's NCCL_DEBUG=INFO log says about the network it chose.

Lines look like ``nid001:4242:4242 [0] NCCL INFO Using network AWS Libfabric`` (RCCL
prints the same "NCCL INFO" prefix). What matters:
- "Using network <name>": the network transport in use; "Socket" on a multi-node job
  means the RDMA plugin did not load and traffic fell back to TCP;
- "NET/Plugin ..." lines: whether the net plugin (librccl-net.so, libnccl-net.so) loaded;
- "NET/OFI ..." lines: the aws-ofi-nccl/aws-ofi-rccl plugin is active (provider, version);
- "NET/OFI Selected Provider is cxi" (aws-ofi-nccl/rccl; newer versions print "Selected
  provider is cxi, fabric is cxi"): the libfabric provider, cxi on HPE Slingshot;
- "GPU Direct RDMA Enabled/Disabled for GPU ... / HCA ..." and "via NET/<name>/<dev>/GDRDMA"
  channels: whether network transfers read and write GPU memory directly;
- "Channel ... via <transport>": P2P/IPC, SHM or NET/<name> between ranks.

A plugin that does not load is reported by RCCL/NCCL (net.cc, tryOpenDynamicLib) as
"NET/Plugin : dlerror=<dlerror> No plugin found (<lib>), using internal implementation",
"NET/Plugin : Plugin load returned <errno> : <dlerror>." or, in newer releases,
"NET/Plugin: Could not find: <lib>"; ``failure_cause`` names the cause from the dlerror text.
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
_PROVIDER = re.compile(r"NET/OFI .*?Selected [Pp]rovider is ([A-Za-z0-9_;+-]+)")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled)", re.IGNORECASE)
_SYMBOL_VERSION = re.compile(r"(?:([^\s:]+): )?version [`'\u2018]([^'`\u2019]+)['\u2019] not found"
                             r"(?: \(required by ([^)]+)\))?")
_NO_FILE = re.compile(r"([^\s:=]+): cannot open shared object file")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_COULD_NOT_FIND = re.compile(r"Could not find:? ([^\s.,]+(?:\.[^\s.,]+)*)")


def failure_cause(line: str) -> str:
    """Why a net plugin did not load, from RCCL/NCCL's NET/Plugin line (its dlerror text)."""
    if match := _SYMBOL_VERSION.search(line):
        library, version, needed_by = match.groups()
        return (f"symbol version {version} not found in {library or 'a library'}"
                + (f" (required by {needed_by})" if needed_by else "")
                + ": the plugin was built against a newer libfabric than the one it loaded")
    if match := _UNDEFINED.search(line):
        return f"undefined symbol {match.group(1)} (plugin and its libraries do not match)"
    if match := _NO_FILE.search(line):
        return f"missing file: {match.group(1)} (not on the loader's path)"
    if match := _COULD_NOT_FIND.search(line):
        return f"missing file: {match.group(1)} (not on the loader's path)"
    if "No plugin found" in line:
        return "no plugin library found (not on the loader's path)"
    return line.split("NCCL INFO", 1)[-1].strip()


@dataclass
class NcclLogSummary:
    networks: list[str] = field(default_factory=list)
    version: str | None = None
    plugin_loaded: str | None = None
    plugin_errors: list[str] = field(default_factory=list)
    ofi: list[str] = field(default_factory=list)
    transports: list[str] = field(default_factory=list)
    net_devices: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
    gdr_lines: list[str] = field(default_factory=list)
    gdr_channels: bool = False
    internal_fallback: bool = False
    lines: int = 0

    @property
    def provider(self) -> str | None:
        return self.providers[0] if self.providers else None

    @property
    def gdr(self) -> bool | None:
        """True when some transfer uses GPU-direct RDMA, False when the log says it is
        disabled and nothing uses it, None when the log does not tell."""
        if self.gdr_channels or any("enabled" in line.lower() for line in self.gdr_lines):
            return True
        return False if self.gdr_lines else None

    @property
    def plugin_failure_causes(self) -> list[str]:
        return [failure_cause(line) for line in self.plugin_errors]

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
                "net_devices": self.net_devices[:4], "provider": self.provider,
                "providers": self.providers, "gdr": self.gdr, "gdr_lines": self.gdr_lines[:4],
                "internal_fallback": self.internal_fallback,
                "plugin_failure_causes": self.plugin_failure_causes[:4], "lines": self.lines}


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
            if "internal implementation" in line or "internal network plugin" in line.lower():
                summary.internal_fallback = True
        if match := _PROVIDER.search(line):
            add(summary.providers, match.group(1))
        if match := _GDR.search(line):
            add(summary.gdr_lines, line.split("NCCL INFO", 1)[-1].strip())
        if match := _OFI.search(line):
            add(summary.ofi, match.group(1))
        if " Channel " in line and (match := _VIA.search(line)):
            add(summary.transports, transport_kind(match.group(1)))
            if match.group(1).endswith("/GDRDMA"):
                summary.gdr_channels = True
        if (match := _NET_DEVICE.search(line)) and match.group(1) not in ("Plugin", "OFI"):
            add(summary.net_devices, f"{match.group(1)}: {match.group(2)}")
    return summary
