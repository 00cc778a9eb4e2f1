"""network: RCCL/NCCL uses the RDMA network plugin and provider, not a silent fallback.

The runner sets NCCL_DEBUG=INFO and NCCL_DEBUG_FILE before the process group starts
(unless the user set NCCL_DEBUG), so each rank's log is a file this check reads. What
fails, each with its cause named from the log (nccl_log.NcclLogSummary.primary_cause, in
every RCCL release's wording) or from this process's own dlopen of the plugin:
- the net plugin the image ships (manifest) not in use: RCCL runs on its internal IB or
  Socket network, or could not create a communicator at all because NCCL_NET names the
  plugin's network ("Error: network AWS Libfabric not found"); the cause: a missing file,
  a symbol version the loaded libfabric lacks (aws-ofi-rccl built against libfabric 2.x
  needs fi_getinfo@FABRIC_1.8, which 1.x does not have), or a plugin that loaded but
  found no usable libfabric provider;
- a multi-node run on "Using network Socket" (TCP instead of Slingshot RDMA);
- a libfabric provider other than the expected one (--expect-net-provider, else
  $FI_PROVIDER: "NET/OFI Selected Provider is cxi" on HPE Slingshot);
- the plugin running over one of libfabric's socket providers (tcp, udp, sockets) with no
  provider expected: slower than RCCL's own transports and what a site profile prevents
  (network.plugin: image pins FI_PROVIDER; none keeps RCCL on its IB transport);
- a multi-node run whose log says GPU-direct RDMA is disabled and no channel uses it.
NCCL_NET=IB or Socket (a site that chose RCCL's own transport) means the plugin is not
expected in use.
The plugin library the manifest names must also exist and load (dlopen, as RCCL does).
"""

from __future__ import annotations

import ctypes
import glob
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..check_context import Context
from ..image_manifest import section
from ..log_signatures import errors, scan
from ..result import INCOMPLETE, NO_GPU, NOT_APPLICABLE, CheckResult, failed, judge, skipped
from .nccl_log import NcclLogSummary, failure_cause, parse

NAME = "network"

PLUGIN_NAMES = ("librccl-net.so", "librccl-net-ofi.so", "libnccl-net.so", "libnccl-net-ofi.so")
NET_ENV = ("NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME",
           "NCCL_IB_HCA", "NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "FI_PROVIDER", "CXI_FORK_SAFE",
           "CXI_FORK_SAFE_HP", "LD_LIBRARY_PATH", "NCCL_DEBUG", "NCCL_DEBUG_FILE")


def find_plugins(environ: dict[str, str] | None = None) -> list[str]:
    """Net plugin libraries on LD_LIBRARY_PATH (where RCCL/NCCL dlopen them from)."""
    environ = dict(os.environ) if environ is None else environ
    found: list[str] = []
    for directory in environ.get("LD_LIBRARY_PATH", "").split(":"):
        for name in PLUGIN_NAMES:
            path = os.path.join(directory, name) if directory else ""
            if path and os.path.exists(path) and path not in found:
                found.append(path)
    return found


def load_library(path: str) -> str | None:
    """None when ``path`` loads with every symbol resolved, else the loader's message."""
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        return str(exc)
    return None


def read_nccl_log(pattern: str | None) -> tuple[str, list[str]]:
    """This process's NCCL debug log text and the files it came from."""
    if not pattern:
        return "", []
    expanded = pattern.replace("%h", "*").replace("%p", str(os.getpid()))
    files = sorted(glob.glob(expanded))
    text = ""
    for file in files:
        try:
            text += Path(file).read_text(errors="replace")
        except OSError:
            continue
    return text, files


def plugin_check(ctx: Context) -> tuple[list[str], dict[str, Any]]:
    config = section(ctx.manifest, "network_plugin")
    problems: list[str] = []
    figures: dict[str, Any] = {"plugin_expected": plugin_wanted(bool(config.get("enabled"))),
                               "plugin_kind": config.get("kind")}
    if config.get("enabled"):
        library = config.get("library")
        figures["plugin_library"] = library
        if not library:
            problems.append("manifest enables the network plugin but names no library")
        elif not Path(library).exists():
            problems.append(f"network plugin {library} is missing")
        else:
            error = load_library(library)
            figures["plugin_loads"] = error is None
            if error:
                figures["plugin_load_error"] = error
                problems.append(f"network plugin {library} does not load: "
                                f"{failure_cause(error)} ({error})")
            elif load_library(Path(library).name) is not None:
                # RCCL/NCCL dlopen the plugin by its bare name: the loader must find it.
                problems.append(f"{Path(library).name} loads from {library} but not by name; "
                                f"add {Path(library).parent} to LD_LIBRARY_PATH")
    else:
        figures["plugins_on_library_path"] = find_plugins()
    return problems, figures


def run(ctx: Context) -> CheckResult:
    problems, figures = plugin_check(ctx)
    figures["env"] = {k: os.environ[k] for k in NET_ENV if k in os.environ}
    figures["expected_provider"] = expected_provider(ctx.options)
    if ctx.mode != "gpu" or ctx.backend != "nccl":
        if problems:
            return failed(NAME, "; ".join(problems), figures)
        loaded = (f"plugin {figures['plugin_library']} loads; " if figures.get("plugin_loads")
                  else "")
        return skipped(NAME, NO_GPU, f"{loaded}network selection needs RCCL/NCCL on GPUs "
                       f"(this run uses {ctx.backend})", figures)
    # Make sure a communicator exists, so the log holds its init lines. Creating it fails
    # when NCCL_NET names a network no plugin provides: the log then says why.
    communicator_error = None
    try:
        probe = torch.ones(1, device=ctx.device)
        dist.all_reduce(probe)
        torch.cuda.synchronize(ctx.device)
    except Exception as exc:  # noqa: BLE001 - torch raises DistBackendError/RuntimeError
        message = str(exc).splitlines()[0] if str(exc) else ""
        communicator_error = f"{type(exc).__name__}: {message}"
    text, files = read_nccl_log(ctx.nccl_log_pattern)
    summary = parse(text)
    figures.update(summary.to_dict())
    found, named = signature_findings(text)
    figures.update(found)
    problems += named
    figures["log_files"] = files
    figures["nodes"] = ctx.nodes
    provider = figures["expected_provider"]
    problems += judge_log(summary, ctx.nodes, figures["plugin_expected"], provider,
                          load_error=figures.get("plugin_load_error"))
    if communicator_error:
        figures["communicator_error"] = communicator_error
        problems.insert(0, communicator_problem(communicator_error, summary,
                                                figures.get("plugin_load_error")))
    if summary.network is None:
        if problems:
            return failed(NAME, "; ".join(problems), figures)
        why = ("NCCL_DEBUG was set by the user; set NCCL_DEBUG=INFO or unset it"
               if ctx.nccl_log_pattern is None else "the NCCL debug log names no network")
        cause = INCOMPLETE if ctx.nodes > 1 else NOT_APPLICABLE
        return skipped(NAME, cause, f"cannot tell which network RCCL/NCCL uses: {why}", figures)
    scope = f"{ctx.nodes} nodes" if ctx.nodes > 1 else "single node, network initialised only"
    plugin = f", plugin {summary.plugin_loaded}" if summary.plugin_loaded else ""
    provider = f", provider {summary.provider}" if summary.provider else ""
    gdr = {True: "in use", False: "disabled", None: "not reported"}[summary.gdr]
    transports = ", ".join(summary.transports) or "none logged"
    return judge(NAME, problems,
                 f"network {summary.network!r}{plugin}{provider}; GPU-direct RDMA {gdr}; "
                 f"transports {transports} ({scope})", figures)


def signature_findings(text: str) -> tuple[dict[str, Any], list[str]]:
    """The log's failure classes (log_signatures.py) as figures, and one problem per
    error class; CSCS's ReFrame xccl check requires the cxi provider line on Slingshot,
    reported here beside the provider judge_log compares."""
    signatures = scan(text.splitlines())
    return ({"log_signatures": signatures, "cscs_sanity_line": "cxi_provider" in signatures},
            [f"the NCCL log names a failure: {line}" for line in errors(signatures)])


#: libfabric providers that carry the plugin over the kernel's sockets, not RDMA
#: (fi_tcp(7), fi_udp(7), fi_sockets(7)); "tcp;ofi_rxm" is how a stacked one is named.
SOCKET_PROVIDERS = ("tcp", "udp", "sockets")
#: NCCL_NET values naming RCCL/NCCL's internal networks: the plugin is then not used.
INTERNAL_NETS = ("ib", "socket")


def plugin_wanted(enabled: bool, environ: dict[str, str] | None = None) -> bool:
    """Whether RCCL should use the image's plugin: it ships one and NCCL_NET does not pick
    an internal network (a site using RCCL's own InfiniBand/RoCE transport sets IB)."""
    environ = dict(os.environ) if environ is None else environ
    return enabled and environ.get("NCCL_NET", "").strip().lower() not in INTERNAL_NETS


def expected_provider(options: Any, environ: dict[str, str] | None = None) -> str | None:
    environ = dict(os.environ) if environ is None else environ
    return getattr(options, "expect_net_provider", None) or environ.get("FI_PROVIDER") or None


def communicator_problem(error: str, summary: NcclLogSummary,
                         load_error: str | None = None) -> str:
    """A failed communicator creation, with the cause the log (or the loader) gives."""
    cause = summary.primary_cause(load_error)
    return f"RCCL/NCCL could not create a communicator ({error})" + (
        f": {cause}" if cause else "")


def judge_log(summary: NcclLogSummary, nodes: int, plugin_expected: bool,
              provider: str | None, load_error: str | None = None) -> list[str]:
    """Problems in what RCCL/NCCL's log says about the network, each naming its cause.
    ``load_error``: the loader's message when this process could not dlopen the plugin
    (more specific than RCCL 7's "Could not find", which it also prints for a missing
    dependency of the plugin)."""
    problems: list[str] = []
    cause = summary.primary_cause(load_error)
    said_something = (summary.network is not None or cause is not None
                      or summary.internal_fallback or bool(summary.networks_not_found))
    if plugin_expected and said_something and not summary.plugin_in_use:
        where = (f"on its internal {summary.network!r} network" if summary.network
                 else "on its internal implementation")
        problems.append(f"RCCL/NCCL did not use the network plugin, it runs {where}: "
                        + (cause or "the log names no reason (no plugin found?)"))
    if nodes > 1 and summary.fell_back_to_socket:
        problems.append(
            f"multi-node run ({nodes} nodes) fell back to TCP sockets ('Using network "
            "Socket'): " + (cause or "the RDMA network plugin is missing or did not load"))
    if provider and summary.provider and summary.provider.lower() != provider.lower():
        problems.append(f"libfabric provider {summary.provider!r} selected, expected "
                        f"{provider!r} (wrong provider: check FI_PROVIDER and that the "
                        f"{provider} provider is in the libfabric the plugin loads)")
    elif not provider and summary.provider \
            and summary.provider.lower().split(";")[0] in SOCKET_PROVIDERS:
        problems.append(f"RCCL's network plugin runs over libfabric's {summary.provider!r} "
                        "provider (kernel sockets, no RDMA): on Slingshot pin the provider "
                        "(a site profile with network.plugin image and provider cxi sets "
                        "FI_PROVIDER=cxi); on InfiniBand/RoCE use RCCL's own transport "
                        "(network.plugin none: NCCL_NET=IB)")
    elif provider and nodes > 1 and summary.plugin_in_use and summary.ofi \
            and not summary.provider:
        problems.append(f"the OFI plugin loaded but the log names no provider; expected "
                        f"{provider!r}")
    if nodes > 1 and summary.gdr is False and not summary.fell_back_to_socket:
        problems.append("GPU-direct RDMA is not in use across nodes ("
                        + summary.gdr_lines[0] + "); check NCCL_NET_GDR_LEVEL and the "
                        "peer-memory/dma-buf support of the driver")
    return problems
