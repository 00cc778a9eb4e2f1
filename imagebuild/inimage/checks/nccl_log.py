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

Which net plugin RCCL/NCCL loaded, across releases (src/net.cc, later src/plugin/net.cc
and plugin_open.cc of https://github.com/ROCm/rccl):
- RCCL 6.0/6.1: "NET/Plugin : Plugin load (librccl-net.so) returned <errno> : <dlerror>" and
  "NET/Plugin : No plugin found, using internal implementation";
- RCCL 6.2/6.3: "NET/Plugin : dlerror=<dlerror> No plugin found (librccl-net.so), using
  internal implementation" or "NET/Plugin : Plugin load returned <errno> : <dlerror>.";
- later 6.x: "NET/Plugin: No plugin found (librccl-net.so)", "NET/Plugin: Plugin load
  returned <errno> : <dlerror> : when loading librccl-net.so" (the dlerror of a file that
  exists but does not load can follow a "No plugin found" line), "NET/Plugin: Using
  internal network plugin."; success: "NET/Plugin: Loaded net plugin <name> (v8)";
- RCCL 7.x (NCCL 2.2x plugin loader): "NET/Plugin: Could not find: <lib>." for a missing
  file, "NET/Plugin: <dlerror>" for one that does not load, no "internal" line; success:
  "NET/Plugin: Plugin name set by env to <lib>" / "Successfully loaded external plugin
  <lib>", then "Initialized NET plugin <name>" and "Assigned NET plugin <name> to comm".
  RCCL 7.2 looks for libnccl-net.so unless NCCL_NET_PLUGIN names the plugin
  (https://github.com/ROCm/rocm-systems/pull/4201).
A plugin that loads but cannot initialise (aws-ofi-nccl finding no usable libfabric
provider) says so on NCCL WARN lines: "NET/OFI No eligible providers were found", "NET/OFI
aws-ofi-nccl initialization failed". NCCL_NET naming a network nothing provides ends
communicator creation with "NCCL WARN Error: network AWS Libfabric not found."
``failure_cause`` names the cause from the dlerror text; ``NcclLogSummary.primary_cause``
picks the most specific one of a log (a symbol version over a bare "No plugin found").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_VERSION = re.compile(r"NCCL INFO (?:cudaDriverVersion \d+\s*)?((?:NCCL|RCCL) version[ :]+\S+)")
_PLUGIN_LOADED = re.compile(r"NET/Plugin\s*:?\s*Loaded (?:net plugin|plugin)\s+(.+?)\s*$")
_PLUGIN_INITIALISED = re.compile(r"NCCL INFO (?:Initialized|Assigned) NET plugin (.+?)(?: to comm)?\s*$")
_PLUGIN_LIBRARY = re.compile(r"(?:NET/Plugin\s*:?\s*Plugin name set by env to|"
                             r"Successfully loaded external plugin)\s+(\S+)")
_PLUGIN_FAILED = re.compile(
    r"NET/Plugin.*(No plugin found|Could not find|dlerror|load returned|Plugin load \(|"
    r"Failed to|failed|not found|cannot open|undefined symbol)", re.IGNORECASE)
_OFI = re.compile(r"NCCL (?:INFO|WARN) NET/OFI (.+?)\s*$")
_OFI_FAILED = re.compile(r"No eligible providers|initialization failed|Unable to find a protocol|"
                         r"Initializing plugin failed|fi_getinfo\(\) call failed", re.IGNORECASE)
_NETWORK_NOT_FOUND = re.compile(r"NCCL WARN .*Error: network (.+?) not found")
_VIA = re.compile(r"\bvia (.+?)\s*$")  # network names contain spaces: "NET/AWS Libfabric/0"
_NET_DEVICE = re.compile(r"NCCL INFO NET/(\w+)\s*: Using (.+?)\s*$")
_PROVIDER = re.compile(r"NET/OFI .*?Selected [Pp]rovider is ([A-Za-z0-9_;+-]+)")
_GDR = re.compile(r"GPU Direct RDMA (Enabled|Disabled)", re.IGNORECASE)
_SYMBOL_VERSION = re.compile(r"(?:([^\s:]+): )?version [`'\u2018]([^'`\u2019]+)['\u2019] not found"
                             r"(?: \(required by ([^)]+)\))?")
_NO_FILE = re.compile(r"([^\s:=]+): cannot open shared object file")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")
_COULD_NOT_FIND = re.compile(r"Could not find:?((?: [^\s]+)+?)\.?\s*(?:Using internal|$)")
#: RCCL/NCCL's own networks: a run on one of them did not use the external plugin.
INTERNAL_NETWORKS = ("socket", "ib")
#: failure_cause ranks: lower is more specific (a log may hold several lines for one load).
_SPECIFIC = {"symbol": 0, "undefined": 1, "dependency": 2, "init": 3, "missing": 4, "other": 5}


def classify(line: str) -> tuple[str, str]:
    """(kind, cause) for a line that says why a net plugin did not load or initialise."""
    if match := _SYMBOL_VERSION.search(line):
        library, version, needed_by = match.groups()
        return "symbol", (f"symbol version {version} not found in {library or 'a library'}"
                          + (f" (required by {needed_by})" if needed_by else "")
                          + ": the plugin was built against a newer libfabric than the one "
                          "it loaded")
    if match := _UNDEFINED.search(line):
        return "undefined", (f"undefined symbol {match.group(1)} (plugin and its libraries "
                             "do not match)")
    if match := _NO_FILE.search(line):
        name = match.group(1)
        kind = "missing" if "-net" in name.rsplit("/", 1)[-1] else "dependency"
        return kind, f"missing file: {name} (not on the loader's path)"
    if match := _COULD_NOT_FIND.search(line):
        names = [n.rstrip(".") for n in match.group(1).split()]
        name = next((n for n in reversed(names) if ".so" in n), names[-1])
        hint = ("; RCCL 7.2 looks for libnccl-net.so unless NCCL_NET_PLUGIN names the plugin"
                if name == "libnccl-net.so" else "")
        return "missing", f"missing file: {name} (not on the loader's path{hint})"
    if "No plugin found" in line:
        return "missing", "no plugin library found (not on the loader's path)"
    if _OFI_FAILED.search(line):
        return "init", ("the plugin loaded but did not initialise: "
                        + line.split("NET/OFI", 1)[-1].strip()
                        + " (no usable libfabric provider: is the site's libfabric, with its "
                        "provider, the one the plugin loads?)")
    return "other", line.split("NCCL INFO", 1)[-1].split("NCCL WARN", 1)[-1].strip()


def failure_cause(line: str) -> str:
    """Why a net plugin did not load, from RCCL/NCCL's NET/Plugin line (its dlerror text)."""
    return classify(line)[1]


@dataclass
class NcclLogSummary:
    networks: list[str] = field(default_factory=list)
    version: str | None = None
    plugin_loaded: str | None = None
    #: The plugin library RCCL/NCCL opened (7.x and NCCL_NET_PLUGIN lines), loaded or not
    #: initialised.
    plugin_library: str | None = None
    plugin_errors: list[str] = field(default_factory=list)
    ofi: list[str] = field(default_factory=list)
    ofi_failures: list[str] = field(default_factory=list)
    #: "Error: network <name> not found": NCCL_NET names a network nothing provides.
    networks_not_found: list[str] = field(default_factory=list)
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
        return [failure_cause(line) for line in self.plugin_errors + self.ofi_failures]

    @property
    def plugin_in_use(self) -> bool:
        """True when the log shows the external plugin carrying the network: its network
        in "Using network", else a loaded plugin that initialised."""
        if self.networks_not_found:
            return False
        if self.network is not None:
            return self.network.lower() not in INTERNAL_NETWORKS
        return (self.plugin_loaded is not None or bool(self.ofi)) and not self.ofi_failures

    def primary_cause(self, load_error: str | None = None) -> str | None:
        """The most specific reason in the log (or in ``load_error``, the loader's own
        message for the plugin) why the plugin is not in use; None when nothing says."""
        candidates = [classify(line) for line in self.plugin_errors + self.ofi_failures]
        if load_error:
            candidates.insert(0, classify(load_error))
        if self.networks_not_found and not candidates:
            name = self.networks_not_found[0]
            why = f"NCCL_NET={name!r} names a network no loaded plugin provides"
            candidates.append(("other", why))
        if not candidates:
            return None
        return min(candidates, key=lambda c: _SPECIFIC[c[0]])[1]

    @property
    def network(self) -> str | None:
        return self.networks[0] if self.networks else None

    @property
    def fell_back_to_socket(self) -> bool:
        return any(name.lower() == "socket" for name in self.networks)

    def to_dict(self) -> dict[str, object]:
        return {"network": self.network, "networks": self.networks, "version": self.version,
                "plugin_loaded": self.plugin_loaded, "plugin_library": self.plugin_library,
                "plugin_in_use": self.plugin_in_use, "plugin_errors": self.plugin_errors[:4],
                "ofi": self.ofi[:6], "ofi_failures": self.ofi_failures[:4],
                "networks_not_found": self.networks_not_found,
                "primary_cause": self.primary_cause(), "transports": self.transports,
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
        if match := _PLUGIN_LIBRARY.search(line):
            summary.plugin_library = match.group(1)
        elif "NET/Plugin" in line:
            if match := _PLUGIN_LOADED.search(line):
                summary.plugin_loaded = match.group(1)
            elif _PLUGIN_FAILED.search(line) and "Failed to find ncclNetPlugin_v" not in line \
                    and "Failed to find ncclCollNetPlugin" not in line:
                # ("Failed to find ncclNetPlugin_v8 symbol": probing older plugin APIs.)
                add(summary.plugin_errors, line.split("NCCL INFO", 1)[-1].strip())
            if "internal implementation" in line or "internal network plugin" in line.lower():
                summary.internal_fallback = True
        if (match := _PLUGIN_INITIALISED.search(line)) \
                and match.group(1).lower() not in INTERNAL_NETWORKS:
            summary.plugin_loaded = summary.plugin_loaded or match.group(1)
        if match := _NETWORK_NOT_FOUND.search(line):
            add(summary.networks_not_found, match.group(1))
        if match := _PROVIDER.search(line):
            add(summary.providers, match.group(1))
        if match := _GDR.search(line):
            add(summary.gdr_lines, line.split("NCCL INFO", 1)[-1].strip())
        if match := _OFI.search(line):
            if _OFI_FAILED.search(match.group(1)):
                add(summary.ofi_failures, "NET/OFI " + match.group(1))
            elif " NCCL INFO " in line:
                add(summary.ofi, match.group(1))
        if " Channel " in line and (match := _VIA.search(line)):
            add(summary.transports, transport_kind(match.group(1)))
            if match.group(1).endswith("/GDRDMA"):
                summary.gdr_channels = True
        if (match := _NET_DEVICE.search(line)) and match.group(1) not in ("Plugin", "OFI"):
            add(summary.net_devices, f"{match.group(1)}: {match.group(2)}")
    return summary
