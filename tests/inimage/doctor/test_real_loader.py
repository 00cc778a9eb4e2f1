"""The doctor's libfabric verdict agrees with the real dynamic loader: a plugin it
passes dlopens with that libfabric, one it fails is refused for the version it names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.inimage.doctor.finding import FAIL, PASS
from imagebuild.inimage.doctor.libfabric import FabricSettings, check
from imagebuild.inimage.doctor.needs import ImageNeeds
from tests.inimage.doctor.elf_kit import build_libfabric, build_plugin

DLOPEN = "import ctypes, os, sys\nctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"


def real_dlopen(plugin: Path, library_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(library_dir)}
    return subprocess.run([sys.executable, "-c", DLOPEN, str(plugin)], env=env,
                          capture_output=True, text=True, check=False)


@pytest.mark.parametrize(("built_against", "host", "verdict"), [
    ("1.22", "1.22", PASS), ("1.22", "2.1", PASS), ("2.1", "1.22", FAIL), ("1.22", "1.15", FAIL)])
def test_verdict_matches_the_loader(tmp_path: Path, built_against: str, host: str,
                                    verdict: str) -> None:
    build = build_libfabric(tmp_path / "build" / built_against / "libfabric.so.1", built_against)
    plugin = build_plugin(tmp_path / "opt/plugin/lib/librccl-net.so", build)
    host_dir = tmp_path / "opt/cray/libfabric" / f"{host}.0" / "lib64"
    build_libfabric(host_dir / "libfabric.so.1", host)
    needs = ImageNeeds("t", "7.2.4", ("gfx942",), True, "/opt/plugin/lib/librccl-net.so", (),
                       None)
    finding = check(tmp_path, needs, FabricSettings(provided_by="site", in_image=True),
                    {"LD_LIBRARY_PATH": f"/opt/cray/libfabric/{host}.0/lib64"})
    loaded = real_dlopen(plugin, host_dir)
    assert finding.status == verdict, finding.reason
    assert (loaded.returncode == 0) == (verdict == PASS), loaded.stderr
    if verdict == FAIL:
        missing = finding.reason.split("needs ")[-1].split(":")[0]
        assert f"version `{missing}' not found" in loaded.stderr
