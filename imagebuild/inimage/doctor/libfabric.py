"""libfabric: the libfabric the plugin will load defines every symbol version it needs.

libfabric versions its symbols (FABRIC_1.0 ... in libfabric.map.in); a plugin built
against 2.x needs fi_getinfo@FABRIC_1.8, which no 1.x defines, and the loader refuses it
("version `FABRIC_1.8' not found"): RCCL then says "No plugin found" and runs over
sockets. On Slingshot sites the host's libfabric (CXI provider) replaces the image's at
run time, so the question is asked of the host's library: from the host, the site's
library directory or /opt/cray/libfabric/*/lib64; inside the image, the one the loader
finds for the plugin. What the plugin needs comes from the manifest (the build read it
from the ELF), or from the plugin's own ELF when it is there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..library_dirs import matching_dirs
from .elf import ElfError, read_dynamic
from .finding import Finding, failed, passed, skipped, warned
from .libraries import Loader, resolve
from .needs import ImageNeeds
from .node import Node

ITEM = "libfabric"
SONAME = "libfabric.so.1"
TAG = re.compile(r"^FABRIC_(\d+)\.(\d+)$")
#: Where HPE's libfabric lives on Cray EX nodes (LUMI's and CSCS's documentation bind or
#: hook it from there); the newest release directory is the default one.
CRAY_GLOB = "/opt/cray/libfabric/*/lib64"
CRAY_PREFIX = "/opt/cray/"
#: libfabric providers that carry no fabric: kernel sockets (tcp, udp, sockets) or one
#: host (shm). The image's own libfabric is built with only these
#: (https://ofiwg.github.io/libfabric/main/man/fi_provider.7.html, "Core providers").
SOCKET_PROVIDERS = ("tcp", "udp", "sockets", "shm")
#: What makes the plugin carry RCCL over the fabric: a site profile that says how.
TCP_FIX = ("name the site profile: --site mi300x-ib on InfiniBand/RoCE clusters (RCCL's own "
           "IB transport, NCCL_NET=IB), or the Slingshot profile (--site cscs-beverin, "
           "--site lumi: the host's libfabric with FI_PROVIDER=cxi)")


@dataclass(frozen=True)
class FabricSettings:
    #: "site": the host's libfabric is used at run time; "image": the image's own.
    provided_by: str | None = None
    #: The host's library directory (a site profile's libfabric.library_dir).
    library_dir: str | None = None
    #: True inside the image: ask the loader which libfabric the plugin gets.
    in_image: bool = False


def tag_key(tag: str) -> tuple[int, int]:
    match = TAG.match(tag)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def cray_releases(root: Path, loader: Loader) -> list[str]:
    """The /opt/cray/libfabric/<release>/lib64 directories holding a libfabric, newest first."""
    return [d for d in matching_dirs(CRAY_GLOB, root) if loader.exists(f"{d}/{SONAME}")]


def host_library(root: Path, settings: FabricSettings, loader: Loader) -> str | None:
    """The host's libfabric.so.1 (a path in root): the site's directory, else the newest
    /opt/cray/libfabric release, else what the system loader finds."""
    if settings.library_dir:
        for directory in matching_dirs(settings.library_dir, root):
            path = f"{directory.rstrip('/')}/{SONAME}"
            if loader.exists(path):
                return path
        return None
    releases = cray_releases(root, loader)
    return f"{releases[0]}/{SONAME}" if releases else loader.find(SONAME)


def pinned_provider(env: dict[str, str]) -> str | None:
    """The provider FI_PROVIDER pins (its first; "tcp;ofi_rxm" is tcp), or None when it is
    unset or excludes ("^verbs": any but verbs; fi_provider(7))."""
    value = env.get("FI_PROVIDER", "").strip()
    if not value or value.startswith("^"):
        return None
    return re.split(r"[,;]", value)[0].strip().lower() or None


def from_host(root: Path, library: str) -> bool:
    """Inside the image: HPE's libfabric (its Cray path), or one on a mount of its own (a
    bind from the host), rather than the image's own build on its root file system."""
    if library.startswith(CRAY_PREFIX):
        return True
    node = Node(root)
    mount = node.mount_of(library, node.mountinfo())
    return mount is not None and (mount.point.rstrip("/") or "/") != "/"


def check(root: Path, needs: ImageNeeds, settings: FabricSettings, env: dict[str, str]
          ) -> Finding:
    if not needs.plugin:
        return skipped(ITEM, "the image has no network plugin")
    if env.get("NCCL_NET") in ("IB", "Socket"):
        return skipped(ITEM, f"NCCL_NET={env['NCCL_NET']}: RCCL uses its own transport, "
                       "not the plugin")
    provider = pinned_provider(env)
    if provider in SOCKET_PROVIDERS:
        return warned(ITEM, f"FI_PROVIDER={env['FI_PROVIDER']}: the plugin carries RCCL over "
                      f"libfabric's {provider} provider, not the fabric", TCP_FIX)
    loader = Loader(root, env.get("LD_LIBRARY_PATH", "").split(":"))
    tags = set(needs.fabric_needs)
    plugin = needs.plugin_library
    if settings.in_image and plugin and loader.exists(plugin):
        try:
            info = read_dynamic(root / resolve(root, plugin).lstrip("/"))
            tags |= {t for f, ts in info.needs.items() if f.startswith("libfabric") for t in ts}
        except ElfError:
            pass
    if not tags:
        return warned(ITEM, "the manifest records no libfabric symbol versions for the plugin",
                      "rebuild the image (its plugin check records them)")
    if settings.in_image:
        library = loader.find(SONAME, plugin if plugin and loader.exists(plugin) else None)
        where = "the plugin loads"
    elif settings.provided_by == "image":
        return skipped(ITEM, "the site uses the image's own libfabric (libfabric.provided_by: "
                       "image)")
    else:
        library = host_library(root, settings, loader)
        where = "the host has"
    if library is None and provider is None and not settings.in_image \
            and not settings.library_dir and settings.provided_by != "site":
        return warned(ITEM, f"the image's plugin is in use with no FI_PROVIDER pin, no "
                      f"NCCL_NET=IB and no host libfabric (looked in {CRAY_GLOB} and the "
                      f"system library directories): it loads the image's own libfabric "
                      f"(tcp, udp, shm) and carries RCCL over TCP", TCP_FIX)
    if library is None:
        looked = settings.library_dir or f"{CRAY_GLOB} and the system library directories"
        status = failed if settings.provided_by == "site" else warned
        found = cray_releases(root, loader) if settings.library_dir else []
        fix = (f"this node has {', '.join(found)}: set libfabric.library_dir to one of them "
               "(a project's sites/<site>.yaml)" if found else "set the site profile's "
               "libfabric.library_dir to the host's libfabric, or bind it into the job")
        return status(ITEM, f"no {SONAME} found (looked in {looked}); the plugin needs "
                      f"{', '.join(sorted(tags, key=tag_key))}", fix)
    try:
        defined = set(read_dynamic(root / resolve(root, library).lstrip("/")).defines)
    except ElfError as exc:
        return failed(ITEM, f"{library}: {exc}", "point libfabric.library_dir at a real "
                      "libfabric")
    missing = sorted(tags - defined, key=tag_key)
    newest = max((t for t in defined if TAG.match(t)), key=tag_key, default="none")
    if missing:
        return failed(ITEM, f"{where} {library} (up to {newest}); the plugin needs "
                      f"{', '.join(missing)}: it will not load, and RCCL falls back to sockets",
                      "build the plugin against the oldest libfabric the sites bind (the "
                      "recipe's network_plugin.libfabric.version)")
    if settings.in_image and provider is None and not from_host(root, library):
        return warned(ITEM, f"the plugin loads the image's own {library} (tcp, udp, shm) and "
                      f"no FI_PROVIDER pins a fabric provider: RCCL over TCP", TCP_FIX)
    return passed(ITEM, f"{where} {library} (up to {newest}); the plugin needs "
                  f"{', '.join(sorted(tags, key=tag_key))}")
