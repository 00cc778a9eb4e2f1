"""What a source archive declares: its requirements and its build requirements.

The lock reads them without building anything (the image builds the archive later, without
isolation, with what the lock installed): PKG-INFO's Requires-Dist (core metadata, written
into every sdist by its build backend) and pyproject.toml's ``[build-system] requires``.
"""

from __future__ import annotations

import tarfile
import tomllib
from email.parser import HeaderParser
from pathlib import Path


def _top_member(archive: tarfile.TarFile, name: str) -> bytes | None:
    members = [m for m in archive.getmembers()
               if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/" + name)]
    if not members:
        return None
    handle = archive.extractfile(members[0])
    return handle.read() if handle else None


def sdist_requires(path: Path) -> tuple[str, ...]:
    """Requires-Dist of the archive's PKG-INFO (markers and extras kept: the resolver
    judges them for the image); none when it declares none."""
    with tarfile.open(path) as archive:
        data = _top_member(archive, "PKG-INFO")
    if data is None:
        return ()
    headers = HeaderParser().parsestr(data.decode("utf-8", errors="replace"))
    return tuple(headers.get_all("Requires-Dist") or ())


def sdist_build_requires(path: Path) -> tuple[str, ...]:
    """PEP 518: ``build-system.requires`` of the sdist's top pyproject.toml; without one,
    PEP 517's legacy default (setuptools and wheel)."""
    with tarfile.open(path) as archive:
        data = _top_member(archive, "pyproject.toml")
    if data is None:
        return ("setuptools>=40.8.0", "wheel")
    system = tomllib.loads(data.decode()).get("build-system")
    if system is None:
        return ("setuptools>=40.8.0", "wheel")
    return tuple(system.get("requires", ()))
