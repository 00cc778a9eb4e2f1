"""Prove RCCL would load the tuner plugin, at build time (imagebuild; standard library only).

usage:
  tuner-plugin-check.py stage LIBRARY --rccl PREFIX --record OUT.json [--probe PROBE]
      in the tuner stage, right after the build: the plugin exports a tuner interface
      (ncclTunerPlugin_v<N>) that the image's RCCL (PREFIX/lib/librccl.so, or
      PREFIX/lib/<multiarch>/librccl.so*, or a library path) looks up, and dlopen(RTLD_NOW)
      succeeds. With --probe (rccl-tuner-probe, which calls interface v4), when v4 is the
      version RCCL would use: init, getCollInfo and destroy succeed without a config.
      Writes what it read to OUT.json.
  tuner-plugin-check.py final LIBRARY --record RECORD.json --manifest MANIFEST.json
      in the final image: dlopen(RTLD_NOW) there, then the record goes into the manifest.

RCCL (like NCCL, src/plugin/tuner.cc) finds a tuner's interface by dlsym of
ncclTunerPlugin_v<N> for a fixed list of N, newest first; those names are string literals in
librccl.so's read-only data, so they are read from the library's bytes, not from a table
here. A plugin that exports none of them loads, and RCCL silently keeps its own tuning.
readelf (binutils) reads the plugin's exports.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys

#: Starts with the literal, which re finds fast; the character before it is checked apart
#: (a leading lookbehind makes re try every byte: 10 s instead of 0.5 s on RCCL 7.2.4's
#: 361 MiB library).
LOOKUP = re.compile(rb"ncclTunerPlugin_v(\d+)(?![0-9A-Za-z_])")
IDENTIFIER = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
EXPORT = re.compile(r"^ncclTunerPlugin_v(\d+)(?:@.*)?$")
#: The interface rccl-tuner-probe calls.
PROBE_VERSION = 4
DLOPEN = "import ctypes, os, sys\nctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"


def fail(message: str) -> None:
    print(f"tuner-plugin-check: {message}", file=sys.stderr)
    sys.exit(1)


def rccl_library(where: str) -> str:
    """The librccl.so of a ROCm prefix (or a library path): PREFIX/lib/librccl.so, else
    PREFIX/lib/*/librccl.so* (Debian's multiarch layout)."""
    if os.path.isfile(where):
        return where
    candidates = [os.path.join(where, "lib", "librccl.so")]
    candidates += sorted(glob.glob(os.path.join(where, "lib", "*", "librccl.so*")))
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    fail(f"no RCCL library under {where} (looked for {where}/lib/librccl.so and "
         f"{where}/lib/*/librccl.so*): cannot tell which tuner interface it looks up")
    raise AssertionError  # unreachable


def versions_looked_up(rccl: str) -> list[int]:
    """The ncclTunerPlugin_v<N> names RCCL dlsyms, newest first."""
    with open(rccl, "rb") as handle:
        data = handle.read()
    return sorted({int(m.group(1)) for m in LOOKUP.finditer(data)
                   if m.start() == 0 or data[m.start() - 1] not in IDENTIFIER}, reverse=True)


def versions_exported(library: str) -> list[int]:
    """The ncclTunerPlugin_v<N> the plugin defines as global objects, newest first."""
    try:
        result = subprocess.run(["readelf", "-W", "--dyn-syms", library], check=False,
                                capture_output=True, text=True)
    except FileNotFoundError:
        fail("readelf not found: the toolchain stage needs binutils")
    if result.returncode != 0:
        fail(f"readelf --dyn-syms {library} failed: {result.stderr.strip()}")
    found = set()
    for line in result.stdout.splitlines():
        words = line.split()
        if (len(words) >= 8 and words[3] == "OBJECT" and words[4] == "GLOBAL"
                and words[6] != "UND"):
            match = EXPORT.match(words[7])
            if match:
                found.add(int(match.group(1)))
    return sorted(found, reverse=True)


def span(versions: list[int]) -> str:
    return ", ".join(f"v{v}" for v in versions) if versions else "none"


def dlopen(library: str) -> None:
    result = subprocess.run([sys.executable, "-c", DLOPEN, library], check=False,
                            capture_output=True, text=True)
    if result.returncode != 0:
        error = result.stderr.strip().splitlines()[-1:] or ["no output"]
        fail(f"dlopen({library}, RTLD_NOW) failed: {error[0]}")


def stage(args: argparse.Namespace) -> None:
    library = args.library
    if not os.path.isfile(library):
        fail(f"{library} was not built")
    rccl = rccl_library(args.rccl)
    wanted = versions_looked_up(rccl)
    if not wanted:
        fail(f"RCCL at {rccl} contains no ncclTunerPlugin_v<N> lookup string: not an RCCL/NCCL "
             f"library, or one that loads no tuner plugin")
    offered = versions_exported(library)
    shared = sorted(set(wanted) & set(offered), reverse=True)
    if not shared:
        only = "only " if offered else ""
        fail(f"RCCL at {rccl} looks up ncclTunerPlugin_{span(wanted)}; the tuner "
             f"{os.path.basename(library)} exports {only}{span(offered)}: RCCL would not load "
             f"it and would silently keep its own tuning. Set rccl_tuner.interface_adapter "
             f"to true (the example's functions behind v4) or build a tuner that exports one "
             f"of the versions this RCCL looks up.")
    dlopen(library)
    probe = None
    if args.probe and shared[0] == PROBE_VERSION:
        # No config: the example then keeps every choice; the calls must succeed.
        env = dict(os.environ, NCCL_TUNER_CONFIG_FILE="/dev/null")
        result = subprocess.run([args.probe, library, "allreduce", "1048576"], check=False,
                                capture_output=True, text=True, env=env)
        if result.returncode != 0:
            fail(f"{args.probe} {library}: {result.stderr.strip() or 'failed'}")
        probe = result.stdout.strip()
    record = {
        "library": library,
        "file": os.path.realpath(library),
        "size": os.path.getsize(os.path.realpath(library)),
        "rccl": rccl,
        "rccl_file": os.path.realpath(rccl),
        "rccl_looks_up": wanted,
        "plugin_exports": offered,
        "chosen": shared[0],
        "probe": probe,
    }
    os.makedirs(os.path.dirname(args.record), exist_ok=True)
    with open(args.record, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")
    print(f"tuner-plugin-check: {library}: ncclTunerPlugin_v{shared[0]} (RCCL {rccl} looks up "
          f"{span(wanted)}, the tuner exports {span(offered)})"
          + (f"; probe: {probe}" if probe else ""))


def final(args: argparse.Namespace) -> None:
    dlopen(args.library)
    with open(args.record, encoding="utf-8") as handle:
        record = json.load(handle)
    with open(args.manifest, encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest.setdefault("rccl_tuner", {})["interface"] = record
    partial = args.manifest + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
        handle.write("\n")
    os.replace(partial, args.manifest)
    print(f"tuner-plugin-check: {args.library} loads in the image")


def main() -> None:
    parser = argparse.ArgumentParser(prog="tuner-plugin-check")
    modes = parser.add_subparsers(dest="mode", required=True)
    in_stage = modes.add_parser("stage")
    in_stage.add_argument("library")
    in_stage.add_argument("--rccl", required=True,
                          help="the ROCm prefix whose librccl.so loads the tuner, or that library")
    in_stage.add_argument("--record", required=True)
    in_stage.add_argument("--probe", default=None, help="rccl-tuner-probe, to call the tuner")
    in_image = modes.add_parser("final")
    in_image.add_argument("library")
    in_image.add_argument("--record", required=True)
    in_image.add_argument("--manifest", required=True)
    args = parser.parse_args()
    stage(args) if args.mode == "stage" else final(args)


if __name__ == "__main__":
    main()
