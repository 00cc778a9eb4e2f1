"""The standard-library ELF reader against binutils' readelf, on this machine's own
libraries and on libraries gcc builds with version scripts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from imagebuild.inimage.doctor.elf import ElfError, read_dynamic
from tests.inimage.doctor.elf_kit import build_libfabric, build_plugin


def readelf(*args: str) -> str:
    tool = shutil.which("readelf")
    assert tool, "readelf (binutils) is needed to cross-check the ELF reader"
    return subprocess.run([tool, "-W", *args], check=True, capture_output=True, text=True).stdout


def readelf_view(path: Path) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(NEEDED, version definitions without the base, version needs per file)."""
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", readelf("-d", str(path)))
    text = readelf("-V", str(path))
    defines = []
    section = text.split("Version definition section")[1].split("Version needs")[0] \
        if "Version definition section" in text else ""
    for line in section.splitlines():
        match = re.search(r"Flags: (\S+)\s+Index: \d+\s+Cnt: \d+\s+Name: (\S+)", line)
        if match and match.group(1) != "BASE":
            defines.append(match.group(2))
    needs: dict[str, list[str]] = {}
    current = None
    needs_text = text.split("Version needs section")[1] if "Version needs section" in text else ""
    for line in needs_text.splitlines():
        file_match = re.search(r"File: (\S+)", line)
        name_match = re.search(r"Name: (\S+)", line)
        if file_match:
            current = file_match.group(1)
            needs[current] = []
        elif name_match and current:
            needs[current].append(name_match.group(1))
    return needed, defines, needs


SYSTEM_LIBRARIES = ["/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                    "/usr/lib/x86_64-linux-gnu/libhwloc.so.15",
                    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"]


@pytest.mark.parametrize("library", SYSTEM_LIBRARIES)
def test_reads_what_readelf_reads_on_system_libraries(library: str) -> None:
    path = Path(library)
    assert path.exists(), f"{library} missing on this machine"
    info = read_dynamic(path)
    needed, defines, needs = readelf_view(path)
    assert list(info.needed) == needed
    assert list(info.defines) == defines
    assert {k: sorted(v) for k, v in info.needs.items()} == {k: sorted(v) for k, v in needs.items()}


def test_reads_libfabric_versions_and_a_plugins_needs(tmp_path: Path) -> None:
    old = build_libfabric(tmp_path / "1.22/libfabric.so.1", "1.22")
    new = build_libfabric(tmp_path / "2.1/libfabric.so.1", "2.1")
    plugin = build_plugin(tmp_path / "plugin/librccl-net.so", new)
    assert list(read_dynamic(old).defines) == readelf_view(old)[1]
    assert read_dynamic(old).defines[-1] == "FABRIC_1.7"
    assert read_dynamic(new).defines[-1] == "FABRIC_1.8"
    assert read_dynamic(plugin).needs["libfabric.so.1"] == ("FABRIC_1.8",)
    assert read_dynamic(old).soname == "libfabric.so.1"


def readelf_exports(path: Path) -> list[str]:
    """Defined GLOBAL and WEAK symbols of .dynsym, as readelf --dyn-syms lists them."""
    found = []
    for line in readelf("--dyn-syms", str(path)).splitlines():
        fields = line.split()
        if len(fields) >= 8 and fields[0].endswith(":") and fields[4] in ("GLOBAL", "WEAK") \
                and fields[6] != "UND":
            found.append(fields[7].split("@")[0])
    return found


@pytest.mark.parametrize("library", SYSTEM_LIBRARIES)
def test_reads_the_exported_symbols_readelf_lists(library: str) -> None:
    info = read_dynamic(Path(library))
    assert sorted(info.exports) == sorted(readelf_exports(Path(library)))
    assert len(info.exports) > 10


def test_a_plugins_tuner_export_is_read(tmp_path: Path) -> None:
    fabric = build_libfabric(tmp_path / "1.22/libfabric.so.1", "1.22")
    plain = build_plugin(tmp_path / "plain/librccl-net.so", fabric)
    tuned = build_plugin(tmp_path / "tuned/librccl-net.so", fabric,
                         exports=("ncclTunerPlugin_v3",))
    assert "ncclNetPlugin_v8" in read_dynamic(plain).exports
    assert not [s for s in read_dynamic(plain).exports if s.startswith("ncclTunerPlugin")]
    assert "ncclTunerPlugin_v3" in read_dynamic(tuned).exports
    assert sorted(read_dynamic(tuned).exports) == sorted(readelf_exports(tuned))


def test_refuses_what_is_not_an_elf64_library(tmp_path: Path) -> None:
    text = tmp_path / "libfabric.so.1"
    text.write_text("INPUT(libfabric.so.1.22)\n")  # a linker script, as some -dev packages ship
    with pytest.raises(ElfError, match="not an ELF file"):
        read_dynamic(text)
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(Path(SYSTEM_LIBRARIES[0]).read_bytes()[:100])
    with pytest.raises(ElfError):
        read_dynamic(truncated)
