"""Debian's own ROCm 5.2.3 userland (bookworm: libamdhip64-5, libhsa-runtime64-1, libhsakmt1,
librocm-smi64-1), as installed on the test machine by .ci/setup-system.sh: real HIP, HSA
and rocm_smi libraries, copied into a tree at the paths the packages install them (an
image built on Debian with those packages), symbolic links kept as links.

Debian's layout is part of what the doctor must get right: libamdhip64.so.5 and
libhsa-runtime64.so.1 are in /usr/lib/x86_64-linux-gnu, librocm_smi64.so.1 in /usr/lib,
each SONAME a link to the versioned file, and libhsa-runtime64 carries a $ORIGIN RUNPATH
(https://packages.debian.org/bookworm/librocm-smi64-1).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: What the packages are installed for: libhsakmt1 comes with libhsa-runtime64-1.
PACKAGES = ("libamdhip64-5", "libhsa-runtime64-1", "libhsakmt1", "librocm-smi64-1")


def installed_libraries(packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """The shared libraries (files and links) the installed ``packages`` put on the system;
    FileNotFoundError naming the first one missing, with the command that installs it."""
    found: list[Path] = []
    for package in packages:
        try:
            listed = subprocess.run(["dpkg-query", "-L", package], capture_output=True,
                                    text=True, check=False)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"dpkg-query is missing: Debian's {package} is read from "
                                    "a Debian machine's package database") from exc
        if listed.returncode != 0:
            raise FileNotFoundError(
                f"Debian package {package} is not installed (apt-get install "
                f"{' '.join(PACKAGES)}; .ci/setup-system.sh installs them)")
        found += [Path(line) for line in listed.stdout.splitlines()
                  if ".so" in Path(line).name and (Path(line).is_file()
                                                     or Path(line).is_symlink())]
    return found


def copy_into(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Copy the packages' libraries into ``root`` at their own paths; their paths in root."""
    copied = []
    for library in installed_libraries(packages):
        target = root / str(library).lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(library, target, follow_symlinks=False)
        copied.append(str(library))
    return copied
