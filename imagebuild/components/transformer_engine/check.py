"""Build-time check of TransformerEngine's PyTorch extension (the final stage runs it with
the venv's Python).

  transformer-engine-check.py VERSION --manifest MANIFEST.json

The distribution transformer_engine_torch is installed at VERSION (built in the image from
the locked source archive), and every shared library of it resolves (ldd) with torch's
library directory and the directories of TransformerEngine's own libraries (the common
library of transformer_engine_rocm, which ``import transformer_engine`` loads first) on the
loader path: an extension that could not load fails the build here, not the first job.
No GPU is needed. What it found goes into the manifest's ``transformer_engine`` entry.
Standard library only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from buildtime import fail, update_manifest

DISTRIBUTION = "transformer_engine_torch"



def library_dirs() -> list[str]:
    """torch/lib and every directory holding a shared library of a transformer_engine*
    distribution."""
    dirs: list[str] = []
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("-", "_")
        if name != "torch" and not name.startswith("transformer_engine"):
            continue
        for file in dist.files or ():
            if ".so" in file.name:
                folder = str(Path(str(dist.locate_file(file))).parent)
                if folder not in dirs:
                    dirs.append(folder)
    return dirs


def built_extension(version: str) -> dict[str, Any]:
    """The installed extension, after proving it is the locked version and loads."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        fail(f"{DISTRIBUTION} is not installed in {sys.prefix}")
    if dist.version != version:
        fail(f"{DISTRIBUTION} {dist.version} is installed, the lock pins {version}")
    extensions = [Path(str(dist.locate_file(f))) for f in dist.files or () if ".so" in f.name]
    if not extensions:
        fail(f"{DISTRIBUTION} {version} installed no shared library: the extension was not built")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        library_dirs() + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])
    linked: dict[str, list[str]] = {}
    for extension in extensions:
        done = subprocess.run(["ldd", str(extension)], check=False, env=env,
                              capture_output=True, text=True)
        missing = [line.strip() for line in done.stdout.splitlines() if "not found" in line]
        if done.returncode != 0 or missing:
            fail(f"{extension} would not load: {'; '.join(missing) or done.stderr.strip()}")
        linked[str(extension)] = sorted(line.split()[0] for line in done.stdout.splitlines()
                                        if "=>" in line)
    return {"torch_extension": {"distribution": DISTRIBUTION, "version": dist.version,
                                "files": sorted(linked), "links": linked}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--manifest", required=True)
    args = parser.parse_args()
    found = built_extension(args.version)
    update_manifest(args.manifest, "transformer_engine", found)
    print(f"transformer-engine-check: {DISTRIBUTION} {args.version}: "
          f"{', '.join(Path(f).name for f in found['torch_extension']['files'])} load")


if __name__ == "__main__":
    main()
