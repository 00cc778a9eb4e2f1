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
import glob
import json
import os
import re
import subprocess
import sys

TAG = re.compile(r"^FABRIC_(\d+)\.(\d+)$")
#: Not ncclCollNetPlugin_v<N>: the collective-network plugin's interface, looked up apart.
#: Starts with the literal, which re finds fast; the character before it is checked apart
#: (a leading lookbehind makes re try every byte: 10 s instead of 0.5 s on RCCL 7.2.4's
#: 361 MiB library).
LOOKUP = re.compile(rb"ncclNetPlugin_v(\d+)(?![0-9A-Za-z_])")
IDENTIFIER = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
EXPORT = re.compile(r"^ncclNetPlugin_v(\d+)(?:@.*)?$")
#: A child process dlopens, so that LD_LIBRARY_PATH applies (the loader reads it at start),
#: and reports the libfabric the loader mapped.
DLOPEN = (
    "import ctypes, json, os, sys\n"
    "ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW)\n"
    "maps = open('/proc/self/maps').read().split()\n"
    "print(json.dumps(sorted({p for p in maps if '/libfabric.so' in p})))\n"
)


def fail(message: str) -> None:
    print(f"network-plugin-check: {message}", file=sys.stderr)
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


def rccl_library(where: str) -> str:
    """The librccl.so of a ROCm prefix (or a library path): PREFIX/lib/librccl.so, else
    PREFIX/lib/*/librccl.so* (Debian's multiarch layout), symlinks resolved."""
    if os.path.isfile(where):
        return where
    candidates = [os.path.join(where, "lib", "librccl.so")]
    candidates += sorted(glob.glob(os.path.join(where, "lib", "*", "librccl.so*")))
    for candidate in candidates:
        if os.path.isfile(candidate):
            return candidate
    fail(f"no RCCL library under {where} (looked for {where}/lib/librccl.so and "
         f"{where}/lib/*/librccl.so*): cannot tell which plugin interface it looks up")
    raise AssertionError  # unreachable


def versions_looked_up(rccl: str) -> list[int]:
    """The ncclNetPlugin_v<N> names RCCL dlsyms, newest first (string literals in .rodata)."""
    with open(rccl, "rb") as handle:
        data = handle.read()
    found = {int(m.group(1)) for m in LOOKUP.finditer(data)
             if m.start() == 0 or data[m.start() - 1] not in IDENTIFIER}
    return sorted(found, reverse=True)


def versions_exported(library: str) -> list[int]:
    """The ncclNetPlugin_v<N> the plugin defines as global objects or functions, newest first."""
    found = set()
    for line in readelf("--dyn-syms", library).splitlines():
        words = line.split()
        if (len(words) >= 8 and words[3] in ("OBJECT", "FUNC") and words[4] == "GLOBAL"
                and words[6] != "UND"):
            match = EXPORT.match(words[7])
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


def interface(library: str, where: str) -> dict:
    rccl = rccl_library(where)
    wanted = versions_looked_up(rccl)
    if not wanted:
        fail(f"RCCL at {rccl} contains no ncclNetPlugin_v<N> lookup string: not an RCCL/NCCL "
             f"library, or one that loads no network plugin")
    offered = versions_exported(library)
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


def dlopen(library: str, library_path: str | None) -> list[str]:
    env = dict(os.environ)
    if library_path is not None:
        env["LD_LIBRARY_PATH"] = library_path
    result = subprocess.run([sys.executable, "-c", DLOPEN, library], check=False, env=env,
                            capture_output=True, text=True)
    if result.returncode != 0:
        error = result.stderr.strip().splitlines()[-1:] or ["no output"]
        where = f" with LD_LIBRARY_PATH={library_path}" if library_path else ""
        fail(f"dlopen({library}, RTLD_NOW){where} failed: {error[0]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


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
    mapped = dlopen(library, args.libfabric_dir)
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
    mapped = dlopen(args.library, None)
    with open(args.record, encoding="utf-8") as handle:
        record = json.load(handle)
    record["dlopen_in_image"] = {"libfabric": mapped}
    with open(args.manifest, encoding="utf-8") as handle:
        manifest = json.load(handle)
    manifest.setdefault("network_plugin", {})["elf"] = record
    partial = args.manifest + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2)
        handle.write("\n")
    os.replace(partial, args.manifest)
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
