"""The plugin stage's interface check: the network plugin must export an ncclNetPlugin_v<N>
that the image's own RCCL looks up, both read from real shared libraries.

gcc builds a stand-in librccl.so holding the lookup names as string literals (as RCCL's
dlsym calls do) and plugins exporting ncclNetPlugin_v<N> objects; the real
network-plugin-check.py runs its ``stage`` mode on them, with a real libfabric stand-in so
that the libfabric checks before it pass. tests/components/network_plugin/test_plugin_stage.py does the same
with the real plugins and Debian's RCCL in a Docker build.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.components.network_plugin import component as network_plugin
from tests.support.scripts import staged

CHECK = staged(network_plugin.CHECK, network_plugin.FOLDER / "check.py")

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("readelf")), reason="needs gcc and binutils")


def gcc(out: Path, source: str, *flags: str) -> Path:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *flags], check=True,
                   capture_output=True, text=True)
    return out


def rccl(where: Path, *versions: int) -> Path:
    """A librccl.so whose read-only data names ``versions``, like RCCL's dlsym calls."""
    names = ", ".join(f'"ncclNetPlugin_v{v}"' for v in versions) or '"ncclNet"'
    where.mkdir(parents=True, exist_ok=True)
    return gcc(where / "librccl.so", (
        f"const char *names[] = {{{names}, \"ncclCollNetPlugin_v99\"}};\n"
        "const char *lookup(int i) { return names[i]; }\n"))


@pytest.fixture
def libfabric(tmp_path: Path) -> Path:
    """A libfabric.so.1 with fi_getinfo@@FABRIC_1.7 in <prefix>/lib, as the stage expects."""
    lib = tmp_path / "libfabric" / "lib"
    lib.mkdir(parents=True)
    script = tmp_path / "libfabric.map"
    script.write_text("FABRIC_1.7 { global: fi_getinfo; local: *; };\n")
    gcc(lib / "libfabric.so.1", "int fi_getinfo(void) { return 0; }\n",
        "-Wl,-soname,libfabric.so.1", f"-Wl,--version-script={script}")
    (lib / "libfabric.so").symlink_to("libfabric.so.1")
    return lib


def plugin(tmp_path: Path, libfabric: Path, *versions: int) -> Path:
    """A librccl-net.so linked against ``libfabric``, exporting ncclNetPlugin_v<N> objects."""
    objects = "".join(f"const struct net ncclNetPlugin_v{v} = {{\"Stand-in\", {v}}};\n"
                      for v in versions)
    return gcc(tmp_path / "librccl-net.so", (
        "struct net { const char *name; int version; };\n" + objects
        + "int fi_getinfo(void);\nint init(void) { return fi_getinfo(); }\n"),
        f"-L{libfabric}", "-lfabric")


def check(library: Path, libfabric: Path, rccl_at: Path, record: Path
          ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), "stage", str(library), "--libfabric-dir", str(libfabric),
         "--built-against", "1.22.0", "--max-abi", "FABRIC_1.7", "--oldest", "1.22.0 (test)",
         "--rccl", str(rccl_at), "--record", str(record)],
        check=False, capture_output=True, text=True)


def test_shared_versions_pass_and_the_newest_is_recorded(tmp_path: Path, libfabric: Path
                                                         ) -> None:
    prefix = tmp_path / "rocm"
    library = rccl(prefix / "lib", 8, 7, 6)
    net = plugin(tmp_path, libfabric, *range(2, 12))
    record = tmp_path / "record" / "plugin.json"
    checked = check(net, libfabric, prefix, record)
    assert checked.returncode == 0, checked.stderr
    written = json.loads(record.read_text())["net_interface"]
    assert written == {"rccl": str(library), "rccl_file": str(library),
                       "rccl_looks_up": [8, 7, 6], "plugin_exports": list(range(11, 1, -1)),
                       "chosen": 8}
    assert "ncclNetPlugin_v8 (RCCL" in checked.stdout and "looks up v8..v6" in checked.stdout


def test_debian_multiarch_layout_and_a_symlink_chain(tmp_path: Path, libfabric: Path) -> None:
    """prefix /usr: librccl.so.1 -> librccl.so.1.0 under lib/<multiarch>/, no lib/librccl.so."""
    prefix = tmp_path / "usr"
    multiarch = prefix / "lib" / "x86_64-linux-gnu"
    built = rccl(multiarch, 7, 6, 5, 4)
    built.rename(multiarch / "librccl.so.1.0")
    (multiarch / "librccl.so.1").symlink_to("librccl.so.1.0")
    record = tmp_path / "record.json"
    checked = check(plugin(tmp_path, libfabric, 5, 6), libfabric, prefix, record)
    assert checked.returncode == 0, checked.stderr
    written = json.loads(record.read_text())["net_interface"]
    assert written["rccl"] == str(multiarch / "librccl.so.1")
    assert written["rccl_file"] == str(multiarch / "librccl.so.1.0")
    assert written["rccl_looks_up"] == [7, 6, 5, 4]
    assert written["plugin_exports"] == [6, 5] and written["chosen"] == 6


def test_a_plugin_exporting_only_a_version_rccl_does_not_look_up_fails(
        tmp_path: Path, libfabric: Path) -> None:
    prefix = tmp_path / "rocm"
    library = rccl(prefix / "lib", 10, 9, 8, 7, 6)
    record = tmp_path / "record.json"
    checked = check(plugin(tmp_path, libfabric, 5), libfabric, prefix, record)
    assert checked.returncode == 1
    assert checked.stderr.strip() == (
        f"network-plugin-check: RCCL at {library} looks up ncclNetPlugin_v10..v6; the plugin "
        "librccl-net.so exports only v5: RCCL would silently fall back to its own sockets/IB "
        "transport. Build a plugin release that exports one of the versions this RCCL looks up.")
    assert not record.exists()


def test_a_plugin_exporting_no_version_fails(tmp_path: Path, libfabric: Path) -> None:
    prefix = tmp_path / "rocm"
    rccl(prefix / "lib", 6)
    checked = check(plugin(tmp_path, libfabric), libfabric, prefix, tmp_path / "record.json")
    assert checked.returncode == 1
    assert "looks up ncclNetPlugin_v6; the plugin librccl-net.so exports none:" in checked.stderr


def test_a_library_with_no_lookup_strings_fails(tmp_path: Path, libfabric: Path) -> None:
    prefix = tmp_path / "rocm"
    library = rccl(prefix / "lib")
    checked = check(plugin(tmp_path, libfabric, 8), libfabric, prefix, tmp_path / "record.json")
    assert checked.returncode == 1
    assert f"RCCL at {library} contains no ncclNetPlugin_v<N> lookup string" in checked.stderr
    assert not (tmp_path / "record.json").exists()


def test_no_rccl_under_the_prefix_fails(tmp_path: Path, libfabric: Path) -> None:
    prefix = tmp_path / "rocm"
    (prefix / "lib").mkdir(parents=True)
    checked = check(plugin(tmp_path, libfabric, 8), libfabric, prefix, tmp_path / "record.json")
    assert checked.returncode == 1
    assert f"no RCCL library under {prefix}" in checked.stderr
