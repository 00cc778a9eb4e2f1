"""A recipe that builds a shipped recipe's network-plugin stage on a Debian base.

Debian packages enough of ROCm to compile and load the RCCL network plugins without a GPU or
AMD's images; two bases, each a ``DebianRocm``:

- ``SID_ROCM_7_2_4``: sid with experimental, which carries ROCm 7.2.4: RCCL 7.2.4 (RCCL
  2.27.7, "RCCL version 2.27.7 compiled with ROCm 7.2.4.0" in librccl.so.1.0), HIP 7.2.4.
  sid itself has older builds of the same packages (librccl1 5.4.3, libamdhip64-dev 6.4.3,
  libamd-comgr3 7.0.2) and experimental is pinned below sid, so every ROCm package is
  pinned to its experimental version (``name=version``). apt 3.3's solver takes a
  dependency's candidate only: pinning librccl-dev alone fails ("librccl1=7.2.4-1~exp3 is
  not selected for install"), and ``-t experimental`` would also take libc6 and perl from
  experimental. Measured: librccl1's .deb is 369 MB (370 MB installed: device code for every
  GPU target); libamd-comgr3 brings sid's libllvm22; the toolchain stage takes 35 s with an
  empty apt cache; the final image is 878 MB (893 MB with rccl-tests for one target).
- ``TRIXIE_ROCM_5_7_1``: Debian trixie's HIP 5.7.1 (libamdhip64-dev) and RCCL 5.4.3
  (librccl-dev).

The recipe keeps the shipped recipe's plugin (kind, repository, ref, libfabric release and
URL) and its sites, optionally its rccl-tests (repository, ref) for targets the test names,
and changes only what the base decides: the base image, the ROCm prefix
(/usr: Debian installs HIP and RCCL there) and the OS packages. The same renderer and the
same plugin template then build it. hipBLASLt is off (hours of compiling); torch is a
placeholder wheel (the image's Python stage is the CPU demo's machinery, proven elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from imagebuild.components.network_plugin import component as plugin_component
from imagebuild.components.rccl_tests import component as tests_component
from imagebuild.recipe.load import load_recipe
from testbed import base_images
from testbed.base_images import DebianBase
from testbed.wheel_index import make_wheel

REPO_ROOT = Path(__file__).resolve().parents[1]
#: What the toolchain stage needs besides ROCm: autotools and compilers, readelf (binutils),
#: python3 (the load check), hwloc's headers. No hipcc: the plugins are C (the 7.2.4 base's
#: ROCm packages bring it, for rccl-tests). libc6-dev: the tuner stage names it (gcc only
#: recommends it); listed here so that every recipe's toolchain stage stays one layer.
TOOLCHAIN_PACKAGES = (
    "autoconf", "automake", "binutils", "bzip2", "ca-certificates", "curl", "file", "g++",
    "gcc", "git", "libtool", "make", "pkg-config", "python3", "libhwloc-dev", "libc6-dev",
)


@dataclass(frozen=True)
class DebianRocm:
    """A Debian base whose packaged HIP and RCCL stand in for a ROCm release."""

    base: DebianBase
    #: The ROCm release Debian's HIP packages are.
    rocm: str
    #: The RCCL release (librccl1's upstream version).
    rccl: str
    #: The base's python3 (the recipe names it).
    python: str
    #: The HIP and RCCL development packages (the toolchain stage).
    rocm_build_packages: tuple[str, ...]
    #: The runtime libraries the plugin links (AMD's images have them in /opt/rocm).
    runtime_packages: tuple[str, ...]

    @property
    def build_packages(self) -> tuple[str, ...]:
        return TOOLCHAIN_PACKAGES + self.rocm_build_packages


#: Debian experimental's ROCm 7.2.4 (source package: version): rccl 7.2.4-1~exp3,
#: rocm-hipamd 7.2.4-1~exp2, rocr-runtime and rocm-llvm 7.2.4+dfsg-1~exp1, rocm-smi-lib
#: 7.2.4-1~exp1, hipcc and hipify 7.2.4+dfsg-1~exp1. The whole closure of librccl-dev,
#: libamdhip64-dev and hipcc that experimental holds (what ``apt-get install -t experimental``
#: takes from there, less libc6 and perl). Every sid recipe names them all, so that its
#: toolchain stage is one BuildKit layer, built once.
_EXPERIMENTAL_ROCM_7_2_4 = {
    "librccl1": "7.2.4-1~exp3",
    "librccl-dev": "7.2.4-1~exp3",
    "libamdhip64-7": "7.2.4-1~exp2",
    "libamdhip64-dev": "7.2.4-1~exp2",
    "libhiprtc7": "7.2.4-1~exp2",
    "libhiprtc-builtins7": "7.2.4-1~exp2",
    "libhsa-runtime64-1": "7.2.4+dfsg-1~exp1",
    "libhsa-runtime-dev": "7.2.4+dfsg-1~exp1",
    "libamd-comgr3": "7.2.4+dfsg-1~exp1",
    "libamd-comgr-dev": "7.2.4+dfsg-1~exp1",
    "librocm-smi64-7": "7.2.4-1~exp1",
    # rccl-tests' compiler: hipcc drives sid's clang-22 with experimental's device libraries
    # (rocm-device-libs-22, which it pins); src/Makefile hipifies with hipify-perl.
    "hipcc": "7.2.4+dfsg-1~exp1",
    "hipify-perl": "7.2.4+dfsg-1~exp1",
}
_RUNTIME_7_2_4 = ("librccl1", "libamdhip64-7", "libhsa-runtime64-1", "libamd-comgr3",
                  "librocm-smi64-7")
SID_ROCM_7_2_4 = DebianRocm(
    base=base_images.SID_EXPERIMENTAL, rocm="7.2.4", rccl="7.2.4 (RCCL 2.27.7)",
    python="3.14",
    rocm_build_packages=tuple(f"{name}={version}"
                              for name, version in _EXPERIMENTAL_ROCM_7_2_4.items()),
    runtime_packages=(*(f"{name}={_EXPERIMENTAL_ROCM_7_2_4[name]}" for name in _RUNTIME_7_2_4),
                      "libhwloc15"))
TRIXIE_ROCM_5_7_1 = DebianRocm(
    base=base_images.TRIXIE, rocm="5.7.1", rccl="5.4.3", python="3.13",
    rocm_build_packages=("libamdhip64-dev", "librccl-dev"),
    runtime_packages=("libamdhip64-5", "librccl1", "libhwloc15"))
PLACEHOLDER_TORCH = "2.0.0+plugin.test"


def placeholder_torch(directory: Path) -> Path:
    """A pure-Python wheel named torch: the recipe format requires a torch pin."""
    return make_wheel(directory, "torch", PLACEHOLDER_TORCH, python_tag="py3", platform="any")


def plugin_recipe(shipped: str, debian: DebianRocm, base_image: str, index_url: str,
                  libfabric_version: str | None = None,
                  sites: tuple[str, ...] | None = None,
                  rccl_tests: tuple[str, ...] = (),
                  rccl_tuner: dict[str, object] | None = None,
                  network_plugin: bool = True) -> str:
    """The YAML of a recipe on ``debian`` (its image pushed as ``base_image``) with
    ``shipped``'s plugin stage (optionally another libfabric release or other sites, for
    the tests of what must fail; ``network_plugin=False``: none), when ``rccl_tests`` names
    GPU targets, ``shipped``'s rccl-tests built for those, and ``rccl_tuner`` as its
    rccl_tuner section (repository, ref, ...)."""
    recipe = load_recipe(shipped, REPO_ROOT)
    plugin = plugin_component.section(recipe)
    tests = tests_component.section(recipe)
    assert plugin is not None and tests is not None, f"{shipped} has no plugin or rccl-tests"
    version = libfabric_version or plugin.libfabric.version
    url = plugin.libfabric.url.replace(plugin.libfabric.version, version)
    data = {
        "version": 1,
        "description": (f"The network-plugin stage of {shipped} on Debian "
                        f"{debian.base.tag}, ROCm {debian.rocm} (test)"),
        "rocm": debian.rocm,
        "base_image": base_image,
        "rocm_prefix": "/usr",
        "python": debian.python,
        "build_packages": list(debian.build_packages),
        "os_packages": list(debian.runtime_packages),
        "sites": list(recipe.sites if sites is None else sites),
        "wheels": {"index_url": index_url, "packages": {"torch": PLACEHOLDER_TORCH}},
        "hipblaslt": {"enabled": False},
        "network_plugin": {
            "enabled": network_plugin, "kind": plugin.kind,
            "repository": plugin.source.repository, "ref": plugin.source.ref,
            "libfabric": {"version": version, "url": url},
        },
        # the engine's built-in frontend: docker/dockerfile images cannot be pulled here
        "dockerfile": {"syntax": None},
    }
    if rccl_tests:
        data["gpu_targets"] = list(rccl_tests)
        data["rccl_tests"] = {"enabled": True,
                              "repository": tests.source.repository,
                              "ref": tests.source.ref}
    if rccl_tuner is not None:
        data["rccl_tuner"] = {"enabled": True, **rccl_tuner}
    return yaml.safe_dump(data, sort_keys=False)


#: The cxi_stack section of a test recipe: HPE's three repositories at release/shs-13.1.0 and
#: libfabric 2.6.0 (the fixtures'), with sid's names of the libraries' packages (the
#: default names are Ubuntu 24.04's).
CXI_STACK_SECTION: dict[str, object] = {
    "enabled": True, "ref": "release/shs-13.1.0",
    "repositories": {name: f"https://github.com/HewlettPackard/shs-{name}.git"
                     for name in ("cassini-headers", "cxi-driver", "libcxi")},
    "libfabric": {"version": "2.6.0",
                  "url": "https://github.com/ofiwg/libfabric/releases/download/v{version}/"
                         "libfabric-{version}.tar.bz2"},
    "runtime_packages": ["libconfig11", "libuv1t64", "libfuse2t64", "libyaml-0-2",
                         "libnl-3-200", "libnl-route-3-200", "libnuma1", "libsensors5",
                         "libcurl4t64", "libjson-c5"],
}


def cxi_stack_recipe(base_image: str, index_url: str) -> str:
    """The YAML of a recipe on sid with ROCm 7.2.4 with rocm-7.2.4's network plugin built on
    the image's own CXI stack (``CXI_STACK_SECTION``), for no site."""
    data = yaml.safe_load(plugin_recipe("rocm-7.2.4", SID_ROCM_7_2_4, base_image, index_url,
                                        sites=()))
    data["description"] = "rocm-7.2.4's network plugin on the image's own CXI stack (test)"
    data["cxi_stack"] = CXI_STACK_SECTION
    return yaml.safe_dump(data, sort_keys=False)
