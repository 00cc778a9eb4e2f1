"""What the dynamic loader reads from a shared library: DT_NEEDED, RPATH/RUNPATH, SONAME,
the symbol versions it defines (.gnu.version_d) and needs (.gnu.version_r), and the
symbols it exports (.dynsym), which dlsym finds.

Standard library only (no binutils in every image): the structures are those of the
System V gABI and the LSB's symbol versioning
(https://refspecs.linuxfoundation.org/LSB_5.0.0/LSB-Core-generic/LSB-Core-generic/symversion.html).
ELF64 little-endian only: the x86_64 and aarch64 images this tool builds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

SHT_DYNAMIC = 6
SHT_DYNSYM = 11
#: st_info's binding: what dlsym can find (gABI, "Symbol Binding").
STB_GLOBAL, STB_WEAK = 1, 2
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 14, 15, 29
VER_FLG_BASE = 0x1


class ElfError(Exception):
    """Not an ELF64 little-endian shared object, or a truncated one."""


@dataclass(frozen=True)
class DynamicInfo:
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    #: Version tags this library defines (not its own base name), e.g. FABRIC_1.7.
    defines: tuple[str, ...]
    #: Library file name -> version tags needed from it.
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Defined global and weak symbols of .dynsym (what dlsym finds), e.g.
    #: ncclTunerPlugin_v3.
    exports: tuple[str, ...] = ()


def _cstr(table: bytes, offset: int) -> str:
    end = table.find(b"\0", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", "replace")


def read_dynamic(path: str | Path) -> DynamicInfo:
    """The dynamic section and version sections of ``path``; ElfError when unreadable."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ElfError(f"{path}: cannot read ({exc.strerror})") from exc
    if data[:4] != b"\x7fELF":
        raise ElfError(f"{path}: not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path}: not ELF64 little-endian")
    try:
        return _parse(data)
    except (struct.error, IndexError) as exc:
        raise ElfError(f"{path}: truncated or malformed ELF ({exc})") from exc


def _parse(data: bytes) -> DynamicInfo:
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = []
    for index in range(shnum):
        fields = struct.unpack_from("<IIQQQQIIQQ", data, shoff + index * shentsize)
        sections.append({"type": fields[1], "offset": fields[4], "size": fields[5],
                         "link": fields[6], "info": fields[7]})

    def strtab(section: dict[str, int]) -> bytes:
        table = sections[section["link"]]
        return data[table["offset"]:table["offset"] + table["size"]]

    soname: str | None = None
    needed: list[str] = []
    rpath: list[str] = []
    runpath: list[str] = []
    defines: list[str] = []
    needs: dict[str, tuple[str, ...]] = {}
    exports: list[str] = []
    for section in sections:
        if section["type"] == SHT_DYNSYM:
            names = strtab(section)
            # Elf64_Sym: st_name (4), st_info (1), st_other (1), st_shndx (2), value, size.
            for offset in range(section["offset"], section["offset"] + section["size"], 24):
                name, info, _, shndx = struct.unpack_from("<IBBH", data, offset)
                if shndx and info >> 4 in (STB_GLOBAL, STB_WEAK) and name:
                    exports.append(_cstr(names, name))
        elif section["type"] == SHT_DYNAMIC:
            names = strtab(section)
            for offset in range(section["offset"], section["offset"] + section["size"], 16):
                tag, value = struct.unpack_from("<qQ", data, offset)
                if tag == 0:
                    break
                if tag == DT_NEEDED:
                    needed.append(_cstr(names, value))
                elif tag == DT_SONAME:
                    soname = _cstr(names, value)
                elif tag == DT_RPATH:
                    rpath += _cstr(names, value).split(":")
                elif tag == DT_RUNPATH:
                    runpath += _cstr(names, value).split(":")
        elif section["type"] == SHT_GNU_VERDEF:
            names = strtab(section)
            offset = section["offset"]
            for _ in range(section["info"]):
                _, flags, _, count, _, aux, following = struct.unpack_from("<HHHHIII", data, offset)
                if count and not flags & VER_FLG_BASE:
                    name, = struct.unpack_from("<I", data, offset + aux)
                    defines.append(_cstr(names, name))
                if not following:
                    break
                offset += following
        elif section["type"] == SHT_GNU_VERNEED:
            names = strtab(section)
            offset = section["offset"]
            for _ in range(section["info"]):
                _, count, file, aux, following = struct.unpack_from("<HHIII", data, offset)
                tags = []
                entry = offset + aux
                for _ in range(count):
                    _, _, _, name, step = struct.unpack_from("<IHHII", data, entry)
                    tags.append(_cstr(names, name))
                    entry += step
                needs[_cstr(names, file)] = tuple(tags)
                if not following:
                    break
                offset += following
    return DynamicInfo(soname, tuple(needed), tuple(rpath), tuple(runpath), tuple(defines), needs,
                       tuple(exports))
