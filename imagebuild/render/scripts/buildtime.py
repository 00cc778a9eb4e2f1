"""What the scripts a build runs share (imagebuild; standard library only).

The build context stages each script as a directory that Python runs, ``<name>/__main__.py``
with this module beside it as ``buildtime.py`` (imagebuild.render.context): a step's
``python3 /tmp/imagebuild/<name>`` runs the script, which imports this module from its own
directory (Python runs a directory holding a ``__main__.py``, with that directory first on
``sys.path``: https://docs.python.org/3/using/cmdline.html#interface-options).

- ``fail``: the one way a script stops the build, naming itself;
- ``readelf``: binutils' readelf, its failure a clear stop;
- ``rccl_library``, ``versions_looked_up``, ``versions_exported``, ``span``: which interface
  versions of a plugin the image's RCCL looks up (string literals in librccl.so's read-only
  data) and which a plugin exports;
- ``dlopen``: loading a library with dlopen(RTLD_NOW) in a fresh interpreter, under a
  given loader path, and what else it mapped;
- ``manifest_section``, ``update_manifest``: what a final-stage check reads from and adds to
  the image's manifest;
- ``device_targets``: the GPU targets whose device code an ELF file carries, read from the
  clang offload bundles in its .hip_fatbin section (hipcc's layout, clang/lib/Driver/
  OffloadBundler.cpp: the magic ``__CLANG_OFFLOAD_BUNDLE__``, the number of entries, then
  per entry its offset, size and bundle-entry ID like ``hipv4-amdgcn-amd-amdhsa--gfx942``),
  compressed ones (``CCOB``, ``--offload-compress``: zlib or zstd) decompressed first.
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
import subprocess
import sys
import zlib
from typing import NoReturn

#: A child process dlopens, so that LD_LIBRARY_PATH applies (the loader reads it at start),
#: and reports what the loader mapped.
_DLOPEN = (
    "import ctypes, json, os, sys\n"
    "ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
    "maps = open('/proc/self/maps').read().split()\n"
    "print(json.dumps(sorted({p for p in maps if sys.argv[2] and sys.argv[2] in p})))\n"
)
IDENTIFIER = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")


def script_name() -> str:
    """The running script's name, as argparse names it: ``network-plugin-check``."""
    name = os.path.basename(os.path.normpath(sys.argv[0]))
    if name == "__main__.py":
        name = os.path.basename(os.path.dirname(os.path.abspath(sys.argv[0])))
    return name.removesuffix(".py")


def fail(message: str) -> NoReturn:
    print(f"{script_name()}: {message}", file=sys.stderr)
    sys.exit(1)


def readelf(*args: str) -> str:
    try:
        result = subprocess.run(["readelf", "-W", *args], check=False, capture_output=True,
                                text=True)
    except FileNotFoundError:
        fail("readelf not found: the toolchain stage needs binutils")
    if result.returncode != 0:
        fail(f"readelf {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def rccl_library(where: str, plugin: str) -> str:
    """The librccl.so of a ROCm prefix (or a library path): PREFIX/lib/librccl.so, else
    PREFIX/lib/*/librccl.so* (Debian's multiarch layout). ``plugin`` names what it is
    looked for, for the message (``plugin``, ``tuner``)."""
    if os.path.isfile(where):
        return where
    candidates = [os.path.join(where, "lib", "librccl.so")]
    candidates += sorted(glob.glob(os.path.join(where, "lib", "*", "librccl.so*")))
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    fail(f"no RCCL library under {where} (looked for {where}/lib/librccl.so and "
         f"{where}/lib/*/librccl.so*): cannot tell which {plugin} interface it looks up")


def versions_looked_up(rccl: str, symbol: str) -> list[int]:
    """The ``<symbol><N>`` names (``ncclNetPlugin_v``) RCCL dlsyms, newest first: string
    literals in its read-only data."""
    # Starts with the literal, which re finds fast; the character before it is checked apart
    # (a leading lookbehind makes re try every byte: 10 s instead of 0.5 s on RCCL 7.2.4's
    # 361 MiB library).
    lookup = re.compile(re.escape(symbol).encode() + rb"(\d+)(?![0-9A-Za-z_])")
    with open(rccl, "rb") as handle:
        data = handle.read()
    return sorted({int(m.group(1)) for m in lookup.finditer(data)
                   if m.start() == 0 or data[m.start() - 1] not in IDENTIFIER}, reverse=True)


def versions_exported(library: str, symbol: str,
                      kinds: tuple[str, ...] = ("OBJECT", "FUNC")) -> list[int]:
    """The ``<symbol><N>`` the library defines as global symbols of ``kinds``, newest first."""
    export = re.compile(re.escape(symbol) + r"(\d+)(?:@.*)?$")
    found = set()
    for line in readelf("--dyn-syms", library).splitlines():
        words = line.split()
        if len(words) >= 8 and words[3] in kinds and words[4] == "GLOBAL" and words[6] != "UND":
            match = export.match(words[7])
            if match:
                found.add(int(match.group(1)))
    return sorted(found, reverse=True)


def span(versions: list[int]) -> str:
    """[10, 9, 8, 7, 6] -> 'v10..v6'; [11, 5] -> 'v11, v5'."""
    if not versions:
        return "none"
    if len(versions) > 2 and versions == list(range(versions[0], versions[-1] - 1, -1)):
        return f"v{versions[0]}..v{versions[-1]}"
    return ", ".join(f"v{v}" for v in versions)


def dlopen(library: str, library_path: str | None = None, mapped: str = "") -> list[str]:
    """dlopen(RTLD_NOW) in a fresh interpreter (``library_path``: its LD_LIBRARY_PATH);
    returns what it mapped whose path holds ``mapped`` (``/libfabric.so``)."""
    env = dict(os.environ)
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = library_path
    result = subprocess.run([sys.executable, "-c", _DLOPEN, library, mapped], check=False,
                            env=env, capture_output=True, text=True)
    if result.returncode != 0:
        error = result.stderr.strip().splitlines()[-1:] or ["no output"]
        where = f" with LD_LIBRARY_PATH={library_path}" if library_path else ""
        fail(f"dlopen({library}, RTLD_NOW){where} failed: {error[0]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def manifest_section(path: str, section: str) -> dict:
    """The manifest's ``section`` (empty when it has none)."""
    with open(path, encoding="utf-8") as handle:
        return json.load(handle).get(section, {})


def update_manifest(path: str, section: str, values: dict) -> dict:
    """Add ``values`` to the manifest's ``section``; the file is written whole and renamed
    over the old one. Returns the section as written."""
    with open(path, encoding="utf-8") as handle:
        manifest = json.load(handle)
    entry = manifest.setdefault(section, {})
    entry.update(values)
    partial = path + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
        handle.write("\n")
    os.replace(partial, path)
    return entry


MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED = b"CCOB"



def section(path: str, name: bytes) -> bytes | None:
    """The bytes of one section of a 64-bit little-endian ELF file, None when absent."""
    with open(path, "rb") as handle:
        data = handle.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
               for i in range(shnum)]
    names = headers[shstrndx]
    for header in headers:
        start = names[4] + header[0]
        if data[start:data.index(b"\0", start)] == name:
            if header[1] == 8:  # SHT_NOBITS
                return b""
            return data[header[4]:header[4] + header[5]]
    return None


def needed(path: str) -> list[str]:
    """The DT_NEEDED entries of a 64-bit little-endian ELF file, read from its .dynamic and
    .dynstr sections (for the final stage, which keeps no binutils); [] for a static file."""
    dynamic, strings = section(path, b".dynamic"), section(path, b".dynstr")
    if not dynamic or not strings:
        return []
    found = []
    for offset in range(0, len(dynamic) - 15, 16):
        tag, value = struct.unpack_from("<qQ", dynamic, offset)
        if tag == 0:  # DT_NULL
            break
        if tag == 1:  # DT_NEEDED: an offset into .dynstr
            found.append(strings[value:strings.index(b"\0", value)].decode())
    return found


def _unzstd(payload: bytes) -> bytes:
    """zstd: Python 3.14's codec, else the ``zstd`` program (Debian's zstd package), which
    the stages that run a device-code check install."""
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
    except ImportError:
        pass
    else:
        return zstd.decompress(payload)
    try:
        done = subprocess.run(["zstd", "-dcq"], input=payload, capture_output=True,
                              check=False, timeout=300)
    except FileNotFoundError:
        raise ValueError("a zstd-compressed offload bundle needs Python 3.14's "
                         "compression.zstd or the zstd program to be read") from None
    if done.returncode != 0:
        raise ValueError(f"zstd -d failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _decompress(blob: bytes, at: int) -> tuple[bytes, int]:
    """A compressed bundle at ``at``: its decompressed bytes and its length in ``blob``."""
    version, method = struct.unpack_from("<HH", blob, at + 4)
    if version == 1:
        total = None
        header = 4 + 2 + 2 + 4 + 8
    elif version == 2:
        total, = struct.unpack_from("<I", blob, at + 8)
        header = 4 + 2 + 2 + 4 + 4 + 8
    elif version == 3:
        total, = struct.unpack_from("<Q", blob, at + 8)
        header = 4 + 2 + 2 + 8 + 8 + 8
    else:
        raise ValueError(f"compressed offload bundle version {version} is not known")
    payload = blob[at + header:at + total] if total else blob[at + header:]
    if method == 0:
        return zlib.decompress(payload), total or len(blob) - at
    if method == 1:
        return _unzstd(payload), total or len(blob) - at
    raise ValueError(f"compressed offload bundle method {method} is not known")


def bundle_entries(blob: bytes) -> list[str]:
    """The bundle-entry IDs of every offload bundle in a .hip_fatbin section's bytes."""
    entries: list[str] = []
    at = 0
    while at < len(blob):
        if blob.startswith(MAGIC, at):
            count, = struct.unpack_from("<Q", blob, at + len(MAGIC))
            cursor = at + len(MAGIC) + 8
            end = cursor
            for _ in range(count):
                offset, size, length = struct.unpack_from("<QQQ", blob, cursor)
                cursor += 24
                entries.append(blob[cursor:cursor + length].decode("ascii"))
                cursor += length
                end = max(end, at + offset + size)
            at = max(end, cursor)
        elif blob.startswith(COMPRESSED, at):
            inner, used = _decompress(blob, at)
            entries += bundle_entries(inner)
            at += used
        else:
            # Padding: hipcc aligns each bundle (to 4096 bytes).
            found = [i for i in (blob.find(MAGIC, at), blob.find(COMPRESSED, at)) if i >= 0]
            at = min(found, default=len(blob))
    return entries


def device_targets(path: str) -> set[str]:
    """The GPU targets of the device code ``path`` carries (``gfx942``, ``gfx90a:xnack+``)."""
    fatbin = section(path, b".hip_fatbin")
    if fatbin is None:
        return set()
    targets = set()
    for entry in bundle_entries(fatbin):
        kind, _, rest = entry.partition("-")
        if kind.startswith("hip"):
            # <kind>-<arch>-<vendor>-<os>-<environment>-<target id>; the environment is empty.
            targets.add(rest.split("-", 4)[-1])
    return targets
