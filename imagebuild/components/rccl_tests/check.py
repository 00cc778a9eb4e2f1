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
A compressed bundle (``CCOB``, ``--offload-compress``) is decompressed first (zlib; zstd
with Python 3.14's codec or the ``zstd`` program): buildtime.device_targets reads them.
``llvm-objdump --offloading`` and ROCm's ``roc-obj-ls`` read the same entries.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import zlib

from buildtime import device_targets, fail


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
