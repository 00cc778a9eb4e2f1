"""The doctor on real libfabric 1.22.0 and 2.1.0 builds (from the source fixtures): the
symbol versions it reads are the ones imagebuild's libfabric policy assumes, and its
verdict on a plugin linked against one release and loaded with the other is the real
loader's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from imagebuild.components.network_plugin.libfabric import abi_name, abi_of
from imagebuild.inimage.doctor.elf import read_dynamic
from imagebuild.inimage.doctor.finding import FAIL, PASS
from imagebuild.inimage.doctor.libfabric import FabricSettings, check
from imagebuild.inimage.doctor.needs import ImageNeeds
from tests.inimage.doctor.elf_kit import build_plugin

pytestmark = pytest.mark.integration

RELEASES = ("1.22.0", "2.1.0")
DLOPEN = "import ctypes, os, sys\nctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"


@pytest.fixture(scope="session")
def real_libfabric() -> dict[str, Path]:
    from testbed.libfabric_builds import libfabric_build

    try:
        return {release: libfabric_build(release) for release in RELEASES}
    except FileNotFoundError as exc:
        pytest.skip(str(exc))


def test_real_releases_define_the_tags_the_policy_assumes(real_libfabric: dict[str, Path]
                                                          ) -> None:
    for release, lib in real_libfabric.items():
        defines = read_dynamic(lib / "libfabric.so.1").defines
        assert defines[-1] == abi_name(abi_of(release)), (release, defines)
        assert defines[0] == "FABRIC_1.0"


@pytest.mark.parametrize(("built_against", "host", "verdict"), [
    ("2.1.0", "1.22.0", FAIL), ("1.22.0", "2.1.0", PASS), ("1.22.0", "1.22.0", PASS)])
def test_verdict_on_real_builds_matches_the_loader(real_libfabric: dict[str, Path],
                                                   tmp_path: Path, built_against: str,
                                                   host: str, verdict: str) -> None:
    plugin = build_plugin(tmp_path / "opt/plugin/lib/librccl-net.so",
                          real_libfabric[built_against] / "libfabric.so.1")
    host_dir = tmp_path / "opt/cray/libfabric" / host / "lib64"
    host_dir.mkdir(parents=True)
    shutil.copy(real_libfabric[host] / "libfabric.so.1", host_dir / "libfabric.so.1")
    needs = ImageNeeds("t", "7.2.4", ("gfx942",), True, "/opt/plugin/lib/librccl-net.so", (),
                       None)
    # From the host, what the plugin needs comes from the manifest, as the build records it.
    recorded = replace(needs, fabric_needs=read_dynamic(plugin).needs["libfabric.so.1"])
    from_host = check(tmp_path, recorded, FabricSettings(provided_by="site"), {})
    inside = check(tmp_path, needs, FabricSettings(provided_by="site", in_image=True),
                   {"LD_LIBRARY_PATH": f"/opt/cray/libfabric/{host}/lib64"})
    loaded = subprocess.run([sys.executable, "-c", DLOPEN, str(plugin)], capture_output=True,
                            text=True, check=False,
                            env={**os.environ, "LD_LIBRARY_PATH": str(host_dir)})
    assert inside.status == verdict, inside.reason
    assert from_host.status == verdict, from_host.reason
    assert (loaded.returncode == 0) == (verdict == PASS), loaded.stderr
    if verdict == FAIL:
        assert "version `FABRIC_1.8' not found" in loaded.stderr
        assert "needs FABRIC_1.8" in inside.reason and "needs FABRIC_1.8" in from_host.reason
