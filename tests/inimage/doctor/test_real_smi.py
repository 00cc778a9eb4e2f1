"""The doctor's loader walk and SMI item on Debian's real ROCm 5.2.3 libraries (HIP, HSA,
rocm_smi; testbed/debian_rocm.py), checked against the real dynamic loader: a process
that loads a torch-, an RCCL- and a plugin-like library (gcc-built stand-ins: bookworm has
no RCCL or torch for ROCm) from the tree maps exactly the files the doctor says, and the
SMI verdict counts the rocm_smi copies the process really maps.

The real process runs on this machine with LD_LIBRARY_PATH set to the tree's default
directories: the loader then searches the tree as it would search an image. (It looks in
LD_LIBRARY_PATH before a RUNPATH, the doctor in an image's default directories after it;
here no library is in both, so the two orders find the same files.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.inimage.doctor.elf import read_dynamic
from imagebuild.inimage.doctor.finding import FAIL, PASS
from imagebuild.inimage.doctor.libraries import DEFAULT_DIRS, Loader, resolve
from imagebuild.inimage.doctor.needs import ImageNeeds
from imagebuild.inimage.doctor.smi import check, loaded_in_process, starting_points
from tests.inimage.doctor.elf_kit import build_library

pytestmark = pytest.mark.integration

VENV = "/opt/venv"
TORCH_HIP = f"{VENV}/lib/python3.11/site-packages/torch/lib/libtorch_hip.so"
RCCL = "/usr/lib/x86_64-linux-gnu/librccl.so.1"  # beside Debian's HIP
PLUGIN_DIR = "/opt/aws-ofi-rccl/lib"
PLUGIN = f"{PLUGIN_DIR}/librccl-net.so"
DEBIAN_SMI = "/usr/lib/librocm_smi64.so.1"
NEEDS = ImageNeeds("debian-rocm", "5.2.3", ("gfx90a",), True, PLUGIN, (), VENV)

# Loads each library in order into one process, as torch, RCCL and RCCL's plugin load,
# and prints every shared object the process then maps.
LOAD_AND_LIST = """
import ctypes, json, os, sys
for path in sys.argv[1:]:
    ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
with open("/proc/self/maps") as maps:
    print(json.dumps(sorted({line.split(None, 5)[5].strip() for line in maps
                             if len(line.split(None, 5)) == 6 and ".so" in line})))
"""


@pytest.fixture(scope="module")
def debian_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image-like tree: Debian's HIP, HSA and rocm_smi at their own paths, a torch
    stand-in in a venv (RUNPATH $ORIGIN, as torch's wheel) and an RCCL stand-in needing
    what ROCm's librccl.so.1 needs from them."""
    from testbed.debian_rocm import copy_into

    root = tmp_path_factory.mktemp("debian-rocm").resolve()
    try:
        copy_into(root)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    build_library(root / RCCL.lstrip("/"), "librccl.so.1",
                  ["libamdhip64.so.5", "libhsa-runtime64.so.1", "librocm_smi64.so.1"])
    build_library(root / TORCH_HIP.lstrip("/"), "libtorch_hip.so",
                  ["libamdhip64.so.5", "librccl.so.1"], "$ORIGIN")
    return root


def with_plugin(tree: Path, directory: Path, smi_name: str) -> Path:
    """A copy of ``tree`` with a plugin that brings its own hwloc, which needs
    ``smi_name``: each finds the next beside it through RUNPATH $ORIGIN, and there lies a
    byte copy of Debian's real librocm_smi64 under that name (the loader goes by the
    name; the copy's own SONAME stays librocm_smi64.so.1)."""
    root = directory / "tree"
    shutil.copytree(tree, root, symlinks=True)
    plugin_dir = root / PLUGIN_DIR.lstrip("/")
    build_library(plugin_dir / "librccl-net.so", "librccl-net.so", ["libhwloc.so.15"],
                  "$ORIGIN")
    build_library(plugin_dir / "libhwloc.so.15", "libhwloc.so.15", [smi_name], "$ORIGIN")
    shutil.copy(root / resolve(root, DEBIAN_SMI).lstrip("/"), plugin_dir / smi_name)
    return root


def real_process(root: Path, libraries: list[str]) -> set[str]:
    """The files (paths in root) a real process maps from root after loading ``libraries``."""
    search = ":".join(str(root / d.lstrip("/")) for d in DEFAULT_DIRS
                      if (root / d.lstrip("/")).is_dir())
    result = subprocess.run([sys.executable, "-c", LOAD_AND_LIST,
                             *[str(root / p.lstrip("/")) for p in libraries]],
                            env={**os.environ, "LD_LIBRARY_PATH": search},
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    prefix = str(root)
    return {path[len(prefix):] for path in json.loads(result.stdout)
            if path.startswith(prefix + "/")}


def smi_copies(paths: set[str]) -> list[str]:
    return sorted(p for p in paths if Path(p).name.startswith("librocm_smi64.so"))


def test_walk_maps_what_the_real_loader_maps(debian_tree: Path) -> None:
    loader = Loader(debian_tree, [])
    starts = starting_points(debian_tree, NEEDS, loader)
    loaded = loaded_in_process(loader, starts)
    mapped = real_process(debian_tree, [TORCH_HIP])
    assert [who for who, _ in starts] == ["torch", "RCCL"]
    # HIP -> HSA -> HSA's kernel thunk, and rocm_smi from Debian's /usr/lib, each reached
    # through its SONAME link; the host's libc, libnuma and libdrm are not in the tree.
    assert {"libamdhip64.so.5", "libhsa-runtime64.so.1", "libhsakmt.so.1",
            "librocm_smi64.so.1"} <= set(loaded)
    assert loaded["librocm_smi64.so.1"][0] == DEBIAN_SMI
    for name, (path, _) in loaded.items():
        info = read_dynamic(debian_tree / resolve(debian_tree, path).lstrip("/"))
        assert info.soname == name, (name, path)
    walked = {resolve(debian_tree, path) for path, _ in loaded.values()}
    walked |= {resolve(debian_tree, start) for _, start in starts}
    assert walked == mapped


def test_one_debian_rocm_smi_passes(debian_tree: Path) -> None:
    finding = check(debian_tree, NEEDS, {})
    copies = smi_copies(real_process(debian_tree, [TORCH_HIP]))
    assert len(copies) == 1
    assert finding.status == PASS, finding.reason
    assert f"one copy of each SMI library: {copies[0]} (torch)" == finding.reason


@pytest.mark.parametrize(("smi_name", "verdict", "count"), [
    # hwloc needs the name RCCL's rocm_smi was loaded by: the loader reuses it.
    ("librocm_smi64.so.1", PASS, 1),
    # hwloc built against another release's rocm_smi (another SONAME): a second copy.
    ("librocm_smi64.so.5", FAIL, 2)])
def test_plugin_hwloc_rocm_smi_matches_the_real_loader(debian_tree: Path, tmp_path: Path,
                                                       smi_name: str, verdict: str,
                                                       count: int) -> None:
    root = with_plugin(debian_tree, tmp_path, smi_name)
    finding = check(root, NEEDS, {})
    copies = smi_copies(real_process(root, [TORCH_HIP, PLUGIN]))
    assert len(copies) == count, copies
    assert finding.status == verdict, finding.reason
    assert finding.reason.count("librocm_smi64") == count, finding.reason
    for path in copies:
        assert path in finding.reason
    if verdict == FAIL:
        assert finding.reason.startswith("two copies of rocm_smi in one process")
        assert f"{PLUGIN_DIR}/{smi_name} (plugin)" in finding.reason
        assert "--disable-rsmi" in finding.fix
