"""Prove the image's libfabric carries the cxi provider (imagebuild; standard library only).

usage:
  cxi-stack-check.py PREFIX --record OUT.json

``PREFIX/bin/fi_info -l`` lists the providers compiled into PREFIX's libfabric, one
``<name>:`` line each (fi_info(1), "-l, --list"); the stack is good only if ``cxi`` is among
them. Without a Cassini NIC (a build machine) ``fi_info -p cxi`` finds no device, so the list
is what the build can prove. Also: libfabric.so.1 resolves libcxi.so.1 from PREFIX. What it
read goes to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess

from buildtime import fail


def providers(prefix: str) -> list[str]:
    fi_info = os.path.join(prefix, "bin", "fi_info")
    env = {**os.environ, "LD_LIBRARY_PATH": os.path.join(prefix, "lib")}
    done = subprocess.run([fi_info, "-l"], capture_output=True, text=True, env=env,
                          check=False)
    if done.returncode != 0:
        fail(f"{fi_info} -l failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return [m.group(1) for m in re.finditer(r"^([a-z0-9_;]+):", done.stdout, re.MULTILINE)]


def linked_libcxi(prefix: str) -> str:
    library = os.path.join(prefix, "lib", "libfabric.so.1")
    env = {**os.environ, "LD_LIBRARY_PATH": os.path.join(prefix, "lib")}
    done = subprocess.run(["ldd", library], capture_output=True, text=True, env=env,
                          check=False)
    found = re.search(r"libcxi\.so\.1 => (\S+)", done.stdout)
    if not found or "not found" in found.group(1):
        fail(f"{library} does not resolve libcxi.so.1 from {prefix}/lib:\n{done.stdout}")
    return found.group(1)


def main() -> None:
    parser = argparse.ArgumentParser(prog="cxi-stack-check.py")
    parser.add_argument("prefix")
    parser.add_argument("--record", required=True)
    args = parser.parse_args()
    listed = providers(args.prefix)
    if "cxi" not in listed:
        fail(f"libfabric in {args.prefix} has no cxi provider (fi_info -l lists: "
             f"{', '.join(listed) or 'nothing'}): it was configured without libcxi and the "
             "CXI headers")
    libcxi = linked_libcxi(args.prefix)
    os.makedirs(os.path.dirname(os.path.abspath(args.record)), exist_ok=True)
    with open(args.record, "w", encoding="utf-8") as handle:
        json.dump({"providers": listed, "libcxi": libcxi}, handle, indent=2, sort_keys=True)
    print(f"cxi-stack: fi_info -l lists {', '.join(listed)}; libfabric links {libcxi}")


if __name__ == "__main__":
    main()
