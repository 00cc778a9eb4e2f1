"""A site's library directory may name its release with one ``*`` component
(``/opt/cray/libfabric/*/lib64``): the newest release the node has is used, so a site
upgrade needs no profile edit. Standard library only: the host launchers, the in-image
doctor and the job script's shell (invocation.LOADER_PREFIX_SCRIPT, with ``sort -V``)
resolve it the same way."""

from __future__ import annotations

import glob
import re
from pathlib import Path


def version_key(text: str) -> tuple[tuple[int, str], ...]:
    """Orders like GNU ``sort -V`` for release names: 1.9.0 < 1.15.2.0 < 1.22.0."""
    return tuple((int(part), "") if part.isdigit() else (-1, part)
                 for part in re.findall(r"\d+|[^\d.]+", text))


def matching_dirs(pattern: str, root: Path = Path("/")) -> list[str]:
    """The directories ``pattern`` names under ``root`` (paths as seen from root), newest
    release first; the pattern itself when it has no ``*``."""
    if "*" not in pattern:
        return [pattern]
    found = ["/" + str(Path(p).relative_to(root))
             for p in glob.glob(str(root / pattern.lstrip("/"))) if Path(p).is_dir()]
    return sorted(found, key=version_key, reverse=True)


def newest_dir(pattern: str, root: Path = Path("/")) -> str | None:
    found = matching_dirs(pattern, root)
    return found[0] if found else None
