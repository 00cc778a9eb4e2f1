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
import json
import os
import subprocess

from buildtime import (
    dlopen,
    fail,
    rccl_library,
    span,
    update_manifest,
    versions_exported,
    versions_looked_up,
)

#: The interface RCCL looks up by name (src/plugin/tuner.cc).
INTERFACE = "ncclTunerPlugin_v"
#: The interface rccl-tuner-probe calls.
PROBE_VERSION = 4


def stage(args: argparse.Namespace) -> None:
    library = args.library
    if not os.path.isfile(library):
        fail(f"{library} was not built")
    rccl = rccl_library(args.rccl, "tuner")
    wanted = versions_looked_up(rccl, INTERFACE)
    if not wanted:
        fail(f"RCCL at {rccl} contains no ncclTunerPlugin_v<N> lookup string: not an RCCL/NCCL "
             f"library, or one that loads no tuner plugin")
    # The interface is a struct the plugin exports as an object.
    offered = versions_exported(library, INTERFACE, kinds=("OBJECT",))
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
    update_manifest(args.manifest, "rccl_tuner", {"interface": record})
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
