"""Build-time device-code diet of an image whose ROCm comes from the base image (imagebuild).

The packaged ROCm releases install GPU code for every architecture they support: each math
library keeps its kernels as separate files named by architecture beside the library, and
finds them by that name at run time (rocBLAS looks for ``<libdir>/rocblas/library/*<gfx>*co``
and warns "No paths matched ..." when there is none: ROCm/rocBLAS
library/src/tensile_host.cpp; hipBLASLt likewise in ``<libdir>/hipblaslt/library``; MIOpen's
kernel and performance databases are ``<prefix>/share/miopen/db/<gfx><CUs>.{kdb,db}``:
ROCm/MIOpen docs, "Kernel and performance databases"). Deleting the files of architectures
the image is not built for took one image from 29 GB to 6.8 GB
(https://github.com/ROCm/legacy-rocm-build/issues/4224).

``prune``: deletes, in each kernel directory given, the files whose name holds a gfx
architecture none of the targets is (files named by no architecture are kept), and writes
what it removed to a JSON report. ``check``: for each library torch loads (``ldd`` of torch's
own libraries) that keeps its kernels beside it, the kernel directory must still hold files
for every target (MIOpen's databases only where the base image had some: without one it
compiles kernels at run time); otherwise it exits 1 naming the library, the directory and
the target.
Standard library only: it runs in the image with its venv's Python.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

#: gfx architecture names inside kernel file names: TensileLibrary_lazy_gfx942.dat,
#: Kernels.so-000-gfx90a-xnack-.hsaco, gfx942130.kdb (MIOpen: architecture + CU count).
ARCH = re.compile(r"gfx[0-9a-f]+")
#: Library (by soname stem) -> its kernel directory, relative to the library's directory.
KERNEL_DIRS = {
    "librocblas": "rocblas/library",
    "libhipblaslt": "hipblaslt/library",
    "libMIOpen": "../share/miopen/db",
}


def matches(token: str, targets: list[str]) -> bool:
    """``token`` (gfx942, gfx942130) is the code of one of ``targets`` (gfx942:xnack-)."""
    return any(token.startswith(target.split(":", 1)[0]) for target in targets)


def prune(directories: list[Path], targets: list[str]) -> dict[str, dict[str, int]]:
    removed: dict[str, dict[str, int]] = {}
    for directory in directories:
        if not directory.is_dir():
            continue
        files = count = 0
        for path in sorted(directory.rglob("*")):
            if path.is_symlink() or not path.is_file():
                continue
            # Generic code objects (gfx9-4-generic, LLVM's AMDGPU "generic processor
            # versions") serve several architectures: kept.
            tokens = [] if "generic" in path.name else ARCH.findall(path.name)
            if tokens and not any(matches(t, targets) for t in tokens):
                count += path.stat().st_size
                files += 1
                path.unlink()
        removed[str(directory)] = {"files": files, "bytes": count}
    return removed


def loaded_libraries(torch_lib: Path) -> set[Path]:
    """Every shared library ``ldd`` resolves for torch's own libraries, and those."""
    found: set[Path] = set()
    for library in sorted(torch_lib.glob("*.so*")):
        found.add(library.resolve())
        result = subprocess.run(["ldd", str(library)], capture_output=True, text=True,
                                check=False)
        for line in result.stdout.splitlines():
            _, arrow, rest = line.partition("=>")
            path = rest.strip().split(" (", 1)[0] if arrow else ""
            if path.startswith("/"):
                found.add(Path(path).resolve())
    return found


def inventory(torch_lib: Path, targets: list[str]) -> list[dict[str, object]]:
    """Per library torch loads that keeps kernels beside it: its kernel directory and how
    many files there are each target's."""
    found: list[dict[str, object]] = []
    for library in sorted(loaded_libraries(torch_lib)):
        stem = library.name.split(".so", 1)[0]
        if stem not in KERNEL_DIRS:
            continue
        kernels = (library.parent / KERNEL_DIRS[stem]).resolve()
        names = [p.name for p in kernels.rglob("*") if p.is_file()] if kernels.is_dir() else []
        found.append({"library": str(library), "stem": stem, "kernels": str(kernels),
                      "files": {t: sum(1 for n in names if any(
                          matches(tok, [t]) for tok in ARCH.findall(n))) for t in targets}})
    return found


def missing_kernels(before: list[dict[str, object]], after: list[dict[str, object]]
                    ) -> list[str]:
    had = {entry["library"]: entry["files"] for entry in before}
    missing = []
    for entry in after:
        files = entry["files"]
        assert isinstance(files, dict)
        for target, count in files.items():
            earlier = had.get(entry["library"], {})
            assert isinstance(earlier, dict)
            if count or (entry["stem"] == "libMIOpen" and not earlier.get(target)):
                continue
            why = "after the diet" if earlier.get(target) else "(nor did the base image)"
            missing.append(f"{entry['library']} loads its kernels from {entry['kernels']}, "
                           f"which holds none for {target} {why}")
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(prog="device-code-check.py")
    parser.add_argument("--targets", required=True, help="comma-separated gfx targets")
    parser.add_argument("--torch-lib", type=Path, required=True)
    parser.add_argument("--report", type=Path, required=True)
    parser.add_argument("directories", nargs="*", type=Path,
                        help="kernel directories to prune (missing ones are skipped)")
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    before = inventory(args.torch_lib, targets)
    removed = prune(args.directories, targets)
    checked = inventory(args.torch_lib, targets)
    missing = missing_kernels(before, checked)
    saved = sum(entry["bytes"] for entry in removed.values())
    files = sum(entry["files"] for entry in removed.values())
    report = {"targets": targets, "removed": removed, "removed_bytes": saved,
              "removed_files": files, "checked": checked}
    args.report.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.report.with_name(args.report.name + ".tmp")
    temporary.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, args.report)
    print(f"device code for {', '.join(targets)} only: removed {files} files, "
          f"{saved / 2**20:.1f} MiB, of other architectures; "
          f"{len(checked)} kernel libraries torch loads checked")
    if missing:
        for line in missing:
            print(f"error: {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
