"""Build-time check of the image's Megatron-LM (the final stage runs it with the venv's Python).

  megatron-check.py PREFIX --manifest MANIFEST.json

- Megatron's rank 0 runs ``make -C megatron/core/datasets`` whenever training starts
  (megatron.training.initialize._compile_dependencies -> megatron.core.datasets.utils.
  compile_helpers, which exits the job when make fails). On a read-only squashfs make must
  find nothing to do: ``make -q`` with the image's PATH (the venv first) must say "up to
  date", or the first job would die trying to compile.
- Every compiled extension in that directory imports (as Megatron imports it).
- ``megatron.core`` imports from the venv (the .pth entry), and pretrain_gpt.py is there.

What it found goes into the manifest's ``megatron`` entry. Standard library only.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

from buildtime import fail, update_manifest


def megatron_checkout(prefix: Path) -> dict[str, Any]:
    """What the checkout holds, after proving its helpers built and up to date."""
    datasets = prefix / "megatron" / "core" / "datasets"
    if not (prefix / "pretrain_gpt.py").is_file():
        fail(f"{prefix}/pretrain_gpt.py is missing: not a Megatron-LM checkout")
    if not (datasets / "Makefile").is_file():
        fail(f"{datasets}/Makefile is missing: this Megatron-LM has no dataset helpers to build")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    question = subprocess.run(["make", "-q", "-C", str(datasets)], check=False, env=env,
                              capture_output=True, text=True)
    if question.returncode != 0:
        dry = subprocess.run(["make", "-n", "-C", str(datasets)], check=False, env=env,
                             capture_output=True, text=True)
        fail(f"make -q -C {datasets} exited {question.returncode}: Megatron would recompile its "
             "dataset helpers when a job starts, which fails on a read-only image. make would "
             f"run:\n{dry.stdout}{dry.stderr}")
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    helpers = sorted(p.name[: -len(suffix)] for p in datasets.glob(f"*{suffix}"))
    if not helpers:
        fail(f"no compiled dataset helpers (*{suffix}) in {datasets}")
    for name in helpers:
        try:
            importlib.import_module(f"megatron.core.datasets.{name}")
        except Exception as exc:  # noqa: BLE001  (any import failure fails the build)
            fail(f"megatron.core.datasets.{name} does not import: {exc!r}")
    try:
        core = importlib.import_module("megatron.core")
    except Exception as exc:  # noqa: BLE001
        fail(f"megatron.core does not import from {sys.executable}: {exc!r}")
    location = Path(str(core.__file__)).resolve().parents[2]
    if location != prefix.resolve():
        fail(f"megatron imports from {location}, not from {prefix}")
    return {"dir": str(prefix), "version": getattr(core, "__version__", None),
            "dataset_helpers": [f"megatron.core.datasets.{name}" for name in helpers],
            "extension_suffix": suffix}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prefix", type=Path)
    parser.add_argument("--manifest", required=True)
    args = parser.parse_args()
    found = megatron_checkout(args.prefix)
    update_manifest(args.manifest, "megatron", found)
    print(f"megatron-check: {args.prefix}: helpers {', '.join(found['dataset_helpers'])} built "
          f"and up to date; megatron.core {found['version']} imports from the venv")


if __name__ == "__main__":
    main()
