"""Prove the built rccl-tests are what the recipe asked for (imagebuild; standard library only).

usage:
  rccl-tests-check.py BIN_DIR --targets gfx90a,gfx942 --binaries all_reduce_perf,...

Every named binary is in BIN_DIR, and the device code it carries is for exactly the recipe's
GPU targets: none missing (a job on that GPU would stop with "no kernel image"), none extra
(hipcc's default target, or every target, means hours of build time and a larger image).

hipcc embeds the device code in the .hip_fatbin section of the ELF as one or more clang
offload bundles (clang/lib/Driver/OffloadBundler.cpp): the magic
``__CLANG_OFFLOAD_BUNDLE__``, the number of entries, then per entry its offset, size and
bundle-entry ID (``hipv4-amdgcn-amd-amdhsa--gfx942``, ``host-x86_64-unknown-linux-gnu-``).
A compressed bundle (``CCOB``, ``--offload-compress``) is decompressed first where the
standard library has its codec (zlib; zstd from Python 3.14). ``llvm-objdump --offloading``
and ROCm's ``roc-obj-ls`` read the same entries.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import zlib

from buildtime import fail

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
        try:
            from compression import zstd  # type: ignore[import-not-found]  # Python 3.14
        except ImportError:
            raise ValueError("a zstd-compressed offload bundle needs Python 3.14's "
                             "compression.zstd to be read") from None
        return zstd.decompress(payload), total or len(blob) - at
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rccl-tests-check.py")
    parser.add_argument("bin_dir")
    parser.add_argument("--targets", required=True, help="comma-separated GPU targets")
    parser.add_argument("--binaries", required=True, help="comma-separated file names")
    args = parser.parse_args(argv)
    wanted = set(args.targets.split(","))
    problems = []
    for name in args.binaries.split(","):
        path = os.path.join(args.bin_dir, name)
        if not os.path.isfile(path):
            problems.append(f"{name}: not built (no {path})")
            continue
        try:
            found = device_targets(path)
        except (ValueError, struct.error, UnicodeDecodeError, zlib.error) as exc:
            problems.append(f"{name}: cannot read its device code: {exc}")
            continue
        if found != wanted:
            missing, extra = sorted(wanted - found), sorted(found - wanted)
            problems.append(f"{name}: device code for {', '.join(sorted(found)) or 'no GPU'}"
                            + (f"; missing {', '.join(missing)}" if missing else "")
                            + (f"; not asked for {', '.join(extra)}" if extra else ""))
        else:
            print(f"rccl-tests-check: {name}: device code for {', '.join(sorted(found))}")
    for problem in problems:
        print(f"rccl-tests-check: {problem}", file=sys.stderr)
    if problems:
        fail(f"the binaries in {args.bin_dir} are not built for exactly "
             f"{', '.join(sorted(wanted))} (the recipe's gpu_targets)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
