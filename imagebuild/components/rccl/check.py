"""Build-time check that every consumer of RCCL in the image loads the pinned one (the final
stage runs it with the venv's Python).

  rccl-check.py LIBRARY_DIR --search DIR [--search DIR ...] --manifest MANIFEST.json

Every ELF file under the search directories (outside LIBRARY_DIR) that needs librccl.so.1
(DT_NEEDED, read from the ELF file itself: the final stage keeps no binutils) must resolve it (ldd, with the image's loader path and cache)
to the file in LIBRARY_DIR: a consumer that resolves the base image's RCCL would run with
another RCCL than the one the recipe pins, silently. RCCL's network and tuner plugins do not
link RCCL: RCCL dlopens them, so they run in whichever RCCL loaded them, the one torch and
rccl-tests resolve. What each consumer resolves goes into the manifest's ``rccl`` entry.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
from pathlib import Path

from buildtime import fail, needed, update_manifest

SONAME = "librccl.so.1"


def elf_files(directory: str, skip: str) -> list[str]:
    found = []
    for root, dirs, files in os.walk(directory):
        if os.path.realpath(root).startswith(skip):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as handle:
                if handle.read(4) == b"\x7fELF":
                    found.append(path)
    return sorted(found)


def needs_rccl(path: str) -> bool:
    try:
        return SONAME in needed(path)
    except (ValueError, IndexError, struct.error):  # not an ELF file this reader knows
        return False


def resolved(path: str) -> str | None:
    """Where the loader finds librccl.so.1 for ``path`` (ldd), None when it does not."""
    done = subprocess.run(["ldd", path], capture_output=True, text=True, check=False)
    for line in done.stdout.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name == SONAME:
            target = rest.split(" (", 1)[0].strip()
            return None if target == "not found" else os.path.realpath(target)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library_dir")
    parser.add_argument("--search", action="append", default=[])
    parser.add_argument("--manifest", required=True)
    args = parser.parse_args()
    pinned_dir = os.path.realpath(args.library_dir)
    pinned = os.path.realpath(os.path.join(args.library_dir, SONAME))
    if not os.path.isfile(pinned):
        fail(f"no {SONAME} in {args.library_dir}: the rccl stage installed none")
    consumers: dict[str, str | None] = {}
    for directory in args.search:
        for path in elf_files(directory, pinned_dir):
            if needs_rccl(path):
                consumers[path] = resolved(path)
    if not consumers:
        fail(f"nothing under {', '.join(args.search)} needs {SONAME}: the pinned RCCL "
             "would be loaded by no one")
    wrong = {path: found for path, found in consumers.items() if found != pinned}
    if wrong:
        fail(f"{len(wrong)} of {len(consumers)} consumers do not load the pinned {pinned}: "
             + "; ".join(f"{path} -> {found or 'not found'}" for path, found in wrong.items()))
    update_manifest(args.manifest, "rccl", {"consumers": consumers, "resolved": pinned})
    for path in consumers:
        print(f"rccl-check: {Path(path).name} -> {pinned}")


if __name__ == "__main__":
    main()
