"""A recipe that builds a shipped recipe's network-plugin stage on Debian trixie.

Debian trixie packages enough of ROCm to compile and load the RCCL network plugins without a
GPU or AMD's images: HIP 5.7.1 (libamdhip64-dev), RCCL 5.4.3 (librccl-dev), hwloc. The
recipe keeps the shipped recipe's plugin (kind, repository, ref, libfabric release and URL)
and its sites, and changes only what the base decides: the base image, the ROCm prefix
(/usr: Debian installs HIP and RCCL there) and the OS packages. The same renderer and the
same plugin template then build it. hipBLASLt is off (hours of compiling); torch is a
placeholder wheel (the image's Python stage is the CPU demo's machinery, proven elsewhere).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from imagebuild.recipe.load import load_recipe
from testbed.wheel_index import make_wheel

REPO_ROOT = Path(__file__).resolve().parents[1]
#: Debian's HIP packages are ROCm 5.7.1's.
DEBIAN_ROCM = "5.7.1"
#: What the toolchain stage needs on trixie: autotools and compilers, readelf (binutils),
#: python3 (the load check), the HIP, RCCL and hwloc headers. No hipcc: the plugins are C.
DEBIAN_BUILD_PACKAGES = (
    "autoconf", "automake", "binutils", "bzip2", "ca-certificates", "curl", "file", "g++",
    "gcc", "git", "libtool", "make", "pkg-config", "python3", "libhwloc-dev",
    "libamdhip64-dev", "librccl-dev",
)
#: The runtime libraries the plugin links (AMD's images have them in /opt/rocm).
DEBIAN_RUNTIME_PACKAGES = ("libamdhip64-5", "librccl1", "libhwloc15")
PLACEHOLDER_TORCH = "2.0.0+plugin.test"


def placeholder_torch(directory: Path) -> Path:
    """A pure-Python wheel named torch: the recipe format requires a torch pin."""
    return make_wheel(directory, "torch", PLACEHOLDER_TORCH, python_tag="py3", platform="any")


def plugin_recipe(shipped: str, base_image: str, index_url: str,
                  libfabric_version: str | None = None,
                  sites: tuple[str, ...] | None = None) -> str:
    """The YAML of a trixie recipe with ``shipped``'s plugin stage (optionally another
    libfabric release or other sites, for the tests of what must fail)."""
    recipe = load_recipe(shipped, REPO_ROOT)
    plugin = recipe.network_plugin
    version = libfabric_version or plugin.libfabric.version
    url = plugin.libfabric.url.replace(plugin.libfabric.version, version)
    data = {
        "version": 1,
        "description": f"The network-plugin stage of {shipped} on Debian trixie (test)",
        "rocm": DEBIAN_ROCM,
        "base_image": base_image,
        "rocm_prefix": "/usr",
        "python": "3.13",
        "build_packages": list(DEBIAN_BUILD_PACKAGES),
        "os_packages": list(DEBIAN_RUNTIME_PACKAGES),
        "sites": list(recipe.sites if sites is None else sites),
        "wheels": {"index_url": index_url, "packages": {"torch": PLACEHOLDER_TORCH}},
        "hipblaslt": {"enabled": False},
        "network_plugin": {
            "enabled": True, "kind": plugin.kind,
            "repository": plugin.source.repository, "ref": plugin.source.ref,
            "libfabric": {"version": version, "url": url},
        },
        # the engine's built-in frontend: docker/dockerfile images cannot be pulled here
        "dockerfile": {"syntax": None},
    }
    return yaml.safe_dump(data, sort_keys=False)
