"""Build-time check of TransformerEngine in the venv (the final stage runs it with the venv's
Python).

  transformer-engine-check.py --distribution NAME [--version V] [--submodules FILE]
      [--targets gfx90a,gfx942 [--accept-missing gfx90a]] --manifest MANIFEST.json

The distribution NAME is installed (at V when given: the index's transformer_engine_torch,
built in the image from the locked source archive; the source build's transformer_engine
names its own version), and every shared library of it resolves (ldd) with torch's library
directory and the directories of TransformerEngine's own libraries on the loader path: a
library that could not load fails the build here, not the first job. With --targets, the
device code in the shared libraries of every transformer_engine* distribution (the common
library holds the kernels) must cover each target but those accepted as missing: on a GPU
without its code the first kernel fails with "invalid device function". No GPU is needed.
What it found goes into the manifest's ``transformer_engine`` entry. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import zlib
from importlib import metadata
from pathlib import Path
from typing import Any

from buildtime import device_targets, fail, update_manifest


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_")


def shared_libraries(prefix: str) -> list[Path]:
    """The shared libraries of every installed distribution whose name starts with prefix."""
    found: list[Path] = []
    for dist in metadata.distributions():
        if not _normalized(dist.metadata["Name"] or "").startswith(prefix):
            continue
        found += [Path(str(dist.locate_file(f))) for f in dist.files or () if ".so" in f.name]
    return sorted(set(found))


def library_dirs() -> list[str]:
    """torch/lib and every directory holding a shared library of a transformer_engine*
    distribution."""
    dirs: list[str] = []
    for library in shared_libraries("torch") + shared_libraries("transformer_engine"):
        if str(library.parent) not in dirs:
            dirs.append(str(library.parent))
    return dirs


def built_libraries(name: str, version: str | None) -> dict[str, Any]:
    """The installed distribution, after proving it is the expected version and loads."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        fail(f"{name} is not installed in {sys.prefix}")
    if version is not None and dist.version != version:
        fail(f"{name} {dist.version} is installed, the lock pins {version}")
    libraries = [Path(str(dist.locate_file(f))) for f in dist.files or () if ".so" in f.name]
    if not libraries:
        fail(f"{name} {dist.version} installed no shared library: it was not built")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        library_dirs() + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    linked: dict[str, list[str]] = {}
    for library in libraries:
        done = subprocess.run(["ldd", str(library)], check=False, env=env,
                              capture_output=True, text=True)
        missing = [line.strip() for line in done.stdout.splitlines() if "not found" in line]
        if done.returncode != 0 or missing:
            fail(f"{library} would not load: {'; '.join(missing) or done.stderr.strip()}")
        linked[str(library)] = sorted(line.split()[0] for line in done.stdout.splitlines()
                                      if "=>" in line)
    return {"distribution": name, "version": dist.version, "files": sorted(linked),
            "links": linked}


def device_code(wanted: list[str], accepted: list[str]) -> dict[str, Any]:
    """The GPU targets TransformerEngine's libraries carry code for; fails unless each
    wanted target but the accepted ones is among them."""
    carried: dict[str, list[str]] = {}
    for library in shared_libraries("transformer_engine"):
        try:
            targets = device_targets(str(library))
        except (ValueError, struct.error, UnicodeDecodeError, zlib.error) as exc:
            fail(f"{library}: cannot read its device code: {exc}")
        if targets:
            carried[str(library)] = sorted(targets)
    found = {target.split(":", 1)[0] for targets in carried.values() for target in targets}
    missing = [t for t in wanted if t.split(":", 1)[0] not in found]
    refused = [t for t in missing if t.split(":", 1)[0] not in accepted]
    if refused:
        held = "; ".join(f"{Path(k).name}: {', '.join(v)}" for k, v in carried.items())
        fail(f"TransformerEngine's libraries hold no device code for {', '.join(refused)} "
             f"(gpu_targets); they hold: {held or 'none'}. Build TransformerEngine for those "
             "targets (transformer_engine.repository and ref), or list them in "
             "transformer_engine.missing_targets to accept an image whose TransformerEngine "
             "fails there")
    return {"targets": sorted(found), "libraries": carried, "missing_accepted": missing}


def submodules(path: str) -> list[dict[str, str]]:
    """The stage's ``git submodule foreach`` lines, ``<commit> <path> <url>``: each
    submodule's commit, path and the URL it was fetched from."""
    rows = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2:
            rows.append({"path": parts[1], "commit": parts[0],
                         **({"url": parts[2]} if len(parts) > 2 else {})})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distribution", required=True)
    parser.add_argument("--version")
    parser.add_argument("--submodules")
    parser.add_argument("--targets", default="")
    parser.add_argument("--accept-missing", default="")
    parser.add_argument("--manifest", required=True)
    args = parser.parse_args()
    built = built_libraries(args.distribution, args.version)
    found: dict[str, Any] = {"version": built["version"], "built": built}
    if args.submodules:
        found["submodules"] = submodules(args.submodules)
    wanted = [t for t in args.targets.split(",") if t]
    if wanted:
        accepted = [t.split(":", 1)[0] for t in args.accept_missing.split(",") if t]
        found["device_code"] = device_code(wanted, accepted)
    update_manifest(args.manifest, "transformer_engine", found)
    code = found.get("device_code")
    print(f"transformer-engine-check: {args.distribution} {built['version']}: "
          f"{', '.join(Path(f).name for f in built['files'])} load"
          + (f"; device code for {', '.join(code['targets'])}" if code else ""))


if __name__ == "__main__":
    main()
