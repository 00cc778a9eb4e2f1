"""Which file the dynamic loader would map for a library name, inside a root directory.

The search order of ld.so(8): DT_RPATH (when there is no DT_RUNPATH), LD_LIBRARY_PATH,
DT_RUNPATH, the directories of /etc/ld.so.conf (what ld.so.cache indexes), then the
default directories; $ORIGIN is the directory of the library that needs it. Symbolic
links are followed inside the root, never out of it (an image's absolute link names a
path in the image).
"""

from __future__ import annotations

import glob
import posixpath
from collections.abc import Iterable
from pathlib import Path

from .elf import DynamicInfo, ElfError, read_dynamic

DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
                "/lib", "/usr/lib")


def resolve(root: Path, path: str, hops: int = 40) -> str:
    """``path`` (absolute, inside ``root``) with every symbolic link followed within root."""
    parts = [p for p in path.split("/") if p]
    done = "/"
    while parts and hops > 0:
        part = parts.pop(0)
        candidate = posixpath.normpath(posixpath.join(done, part))
        host = root / candidate.lstrip("/")
        if host.is_symlink():
            hops -= 1
            target = str(host.readlink())
            base = "/" if target.startswith("/") else done
            parts = [p for p in posixpath.normpath(posixpath.join(base, target)).split("/") if p] \
                + parts
            done = "/"
        else:
            done = candidate
    return done


def ld_conf_dirs(root: Path, conf: str = "/etc/ld.so.conf", depth: int = 0) -> list[str]:
    """Directories listed in ld.so.conf and the files it includes."""
    found: list[str] = []
    try:
        text = (root / conf.lstrip("/")).read_text()
    except OSError:
        return found
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("include ") and depth < 4:
            pattern = line.split(None, 1)[1]
            if not pattern.startswith("/"):
                pattern = posixpath.join(posixpath.dirname(conf), pattern)
            for included in sorted(glob.glob(str(root / pattern.lstrip("/")))):
                found += ld_conf_dirs(root, "/" + str(Path(included).relative_to(root)), depth + 1)
        elif line.startswith("/"):
            found.append(line)
    return found


class Loader:
    """Library lookup in ``root`` with the given LD_LIBRARY_PATH."""

    def __init__(self, root: str | Path, library_path: Iterable[str] = ()):
        self.root = Path(root)
        self.library_path = [d for d in library_path if d]
        self.system_dirs = [*ld_conf_dirs(self.root), *DEFAULT_DIRS]
        self._info: dict[str, DynamicInfo | None] = {}

    def exists(self, path: str) -> bool:
        return (self.root / resolve(self.root, path).lstrip("/")).is_file()

    def info(self, path: str) -> DynamicInfo | None:
        """The ELF dynamic information of ``path`` (in root); None when not a readable ELF."""
        real = resolve(self.root, path)
        if real not in self._info:
            try:
                self._info[real] = read_dynamic(self.root / real.lstrip("/"))
            except ElfError:
                self._info[real] = None
        return self._info[real]

    def find(self, name: str, needed_by: str | None = None) -> str | None:
        """The path (in root) the loader maps for ``name`` needed by ``needed_by``."""
        if "/" in name:
            return name if self.exists(name) else None
        dirs: list[str] = []
        info = self.info(needed_by) if needed_by else None
        origin = posixpath.dirname(resolve(self.root, needed_by)) if needed_by else ""
        if info and not info.runpath:
            dirs += info.rpath
        dirs += self.library_path
        if info:
            dirs += info.runpath
        dirs += self.system_dirs
        for directory in dirs:
            directory = directory.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
            candidate = posixpath.join(directory, name)
            if self.exists(candidate):
                return candidate
        return None
