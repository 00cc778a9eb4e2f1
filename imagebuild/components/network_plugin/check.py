"""Prove the RCCL network plugin loads, at build time (imagebuild; standard library only).

usage:
  network-plugin-check.py stage LIBRARY --libfabric-dir DIR --built-against RELEASE
                                 --max-abi FABRIC_x.y --oldest TEXT --rccl PREFIX
                                 --record OUT.json
      in the plugin stage, right after the build: the plugin has no RPATH/RUNPATH into
      the image's libfabric (it would shadow the one a site binds), every libfabric symbol
      version it needs is at most --max-abi (the newest tag the oldest libfabric the recipe
      supports defines), it exports an interface version (ncclNetPlugin_v<N>) that the
      image's RCCL (PREFIX/lib/librccl.so, or PREFIX/lib/<multiarch>/librccl.so*, or a
      library path) looks up, and dlopen(RTLD_NOW) succeeds with the libfabric in DIR.
      Writes what it read from the ELF to OUT.json.
  network-plugin-check.py final LIBRARY --record RECORD.json --manifest MANIFEST.json
      in the final image: dlopen(RTLD_NOW) with the image's own loader configuration,
      then the record (and which libfabric the loader chose) goes into the manifest.

libfabric versions its symbols (FABRIC_1.0, ... in libfabric.map.in); a plugin linked
against a release needs that release's tag for fi_getinfo, and the loader refuses it with
an older libfabric ("version `FABRIC_1.8' not found"). readelf (binutils) reads the ELF.

RCCL (like NCCL) finds a net plugin's interface by dlsym of ncclNetPlugin_v<N> for a fixed
list of N, newest first; those names are string literals in librccl.so's read-only data, so
they are read from the library's bytes. A plugin that exports none of them loads, and RCCL
silently uses its own sockets/IB transport instead.
"""

from __future__ import annotations

import argparse
import json
import os
import re

from buildtime import (
    dlopen,
    fail,
    rccl_library,
    readelf,
    span,
    update_manifest,
    versions_exported,
    versions_looked_up,
)

TAG = re.compile(r"^FABRIC_(\d+)\.(\d+)$")
#: The interface RCCL looks up by name (not ncclCollNetPlugin_v<N>: the collective-network
#: plugin's interface, looked up apart).
INTERFACE = "ncclNetPlugin_v"


def dynamic(library: str) -> dict[str, list[str]]:
    """NEEDED, RPATH and RUNPATH entries of the dynamic section."""
    out: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": []}
    for line in readelf("-d", library).splitlines():
        match = re.search(r"\((NEEDED|RPATH|RUNPATH)\)\s+.*?\[(.*)\]", line)
        if match:
            values = match.group(2).split(":") if match.group(1) != "NEEDED" else [match.group(2)]
            out[match.group(1)] += values
    return out


def version_needs(library: str) -> dict[str, list[str]]:
    """Library file -> the symbol version tags the plugin needs from it (.gnu.version_r)."""
    needs: dict[str, list[str]] = {}
    current = None
    for line in readelf("-V", library).splitlines():
        file_match = re.search(r"File: (\S+)", line)
        name_match = re.search(r"Name: (\S+)", line)
        if file_match:
            current = file_match.group(1)
            needs.setdefault(current, [])
        elif name_match and current is not None:
            needs[current].append(name_match.group(1))
    return {file: sorted(tags, key=tag_key) for file, tags in needs.items()}


def fabric_symbols(library: str) -> list[str]:
    """Undefined dynamic symbols bound to a FABRIC_x.y version, e.g. fi_getinfo@FABRIC_1.7."""
    found = set()
    for line in readelf("--dyn-syms", library).splitlines():
        words = line.split()
        if len(words) >= 8 and words[6] == "UND" and "@FABRIC_" in words[7]:
            found.add(words[7].replace("@@", "@"))
    return sorted(found)


def interface(library: str, where: str) -> dict:
    rccl = rccl_library(where, "plugin")
    wanted = versions_looked_up(rccl, INTERFACE)
    if not wanted:
        fail(f"RCCL at {rccl} contains no ncclNetPlugin_v<N> lookup string: not an RCCL/NCCL "
             f"library, or one that loads no network plugin")
    offered = versions_exported(library, INTERFACE)
    shared = sorted(set(wanted) & set(offered), reverse=True)
    if not shared:
        only = "only " if offered else ""
        fail(f"RCCL at {rccl} looks up ncclNetPlugin_{span(wanted)}; the plugin "
             f"{os.path.basename(library)} exports {only}{span(offered)}: RCCL would silently "
             f"fall back to its own sockets/IB transport. Build a plugin release that "
             f"exports one of the versions this RCCL looks up.")
    return {"rccl": rccl, "rccl_file": os.path.realpath(rccl), "rccl_looks_up": wanted,
            "plugin_exports": offered, "chosen": shared[0]}


def tag_key(tag: str) -> tuple[int, int]:
    match = TAG.match(tag)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def stage(args: argparse.Namespace) -> None:
    library = args.library
    if not os.path.isfile(library):
        fail(f"{library} was not installed (the plugin build produced no librccl-net.so)")
    prefix = os.path.dirname(os.path.normpath(args.libfabric_dir))
    entries = dynamic(library)
    for kind in ("RPATH", "RUNPATH"):
        shadowing = [p for p in entries[kind] if p == prefix or p.startswith(prefix + "/")]
        if shadowing:
            fail(f"{library} has {kind} {':'.join(shadowing)}, which would make it load the "
                 f"image's libfabric instead of the one a site binds at run time")
    needs = {file: tags for file, tags in version_needs(library).items()
             if file.startswith("libfabric.so")}
    if not needs:
        fail(f"{library} needs no libfabric symbol versions: not linked against libfabric?")
    symbols = fabric_symbols(library)
    tags = sorted({tag for file_tags in needs.values() for tag in file_tags}, key=tag_key)
    too_new = [tag for tag in tags if tag_key(tag) > tag_key(args.max_abi)]
    if too_new:
        users = [s for s in symbols if s.split("@", 1)[1] in too_new]
        fail(f"{os.path.basename(library)} needs {', '.join(too_new)} ({', '.join(users)}), "
             f"which libfabric {args.oldest} does not provide (it defines up to "
             f"{args.max_abi}): it would not load there, and RCCL would fall back to sockets. "
             f"Build the plugin against an older libfabric (this one: {args.built_against}).")
    net = interface(library, args.rccl)
    mapped = dlopen(library, args.libfabric_dir, "/libfabric.so")
    record = {
        "library": library,
        "file": os.path.realpath(library),
        "size": os.path.getsize(os.path.realpath(library)),
        "needed": entries["NEEDED"],
        "rpath": entries["RPATH"],
        "runpath": entries["RUNPATH"],
        "libfabric_versions_needed": tags,
        "libfabric_symbols": symbols,
        "built_against": args.built_against,
        "loads_with_oldest": args.oldest,
        "max_abi": args.max_abi,
        "dlopen_in_stage": {"libfabric": mapped},
        "net_interface": net,
    }
    os.makedirs(os.path.dirname(args.record), exist_ok=True)
    with open(args.record, "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=2)
        handle.write("\n")
    print(f"network-plugin-check: {library}: needs {', '.join(tags)}; loads with "
          f"{', '.join(mapped)}; at most {args.max_abi} allowed ({args.oldest}); "
          f"ncclNetPlugin_v{net['chosen']} (RCCL {net['rccl']} looks up "
          f"{span(net['rccl_looks_up'])}, the plugin exports {span(net['plugin_exports'])})")


def final(args: argparse.Namespace) -> None:
    mapped = dlopen(args.library, None, "/libfabric.so")
    with open(args.record, encoding="utf-8") as handle:
        record = json.load(handle)
    record["dlopen_in_image"] = {"libfabric": mapped}
    update_manifest(args.manifest, "network_plugin", {"elf": record})
    print(f"network-plugin-check: {args.library} loads in the image with {', '.join(mapped)}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="network-plugin-check")
    modes = parser.add_subparsers(dest="mode", required=True)
    in_stage = modes.add_parser("stage")
    in_stage.add_argument("library")
    in_stage.add_argument("--libfabric-dir", required=True)
    in_stage.add_argument("--built-against", required=True)
    in_stage.add_argument("--max-abi", required=True)
    in_stage.add_argument("--oldest", required=True)
    in_stage.add_argument("--rccl", required=True,
                          help="the ROCm prefix whose librccl.so loads the plugin, or that library")
    in_stage.add_argument("--record", required=True)
    in_image = modes.add_parser("final")
    in_image.add_argument("library")
    in_image.add_argument("--record", required=True)
    in_image.add_argument("--manifest", required=True)
    args = parser.parse_args()
    if args.mode == "stage" and not TAG.match(args.max_abi):
        fail(f"--max-abi {args.max_abi!r}: expected FABRIC_x.y")
    stage(args) if args.mode == "stage" else final(args)


if __name__ == "__main__":
    main()
