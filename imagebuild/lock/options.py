"""Per-run overrides of where a lock's bytes come from (mirrors, a local wheel index, the
download cache): none of them changes a recipe, or what its lock pins."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.errors import LockError


@dataclass(frozen=True)
class LockOptions:
    """Per-run overrides for mirrors and air-gapped sites; none of them changes a recipe."""

    #: Wheel index for the pinned ROCm wheels (URL or local directory of wheels).
    index_url: str | None = None
    #: PyPI (or a mirror) for the transitive dependencies; None: uv's default.
    pypi_url: str | None = None
    #: Prefix rewrites for source repositories, e.g. {"https://github.com/": "https://m/"}.
    git_mirrors: Mapping[str, str] = field(default_factory=dict)
    cache_dir: Path | None = None

    @classmethod
    def from_env(cls, **overrides: Any) -> LockOptions:
        mirrors = dict(parse_mirrors(os.environ.get("IMAGEBUILD_GIT_MIRRORS", "")))
        mirrors.update(overrides.pop("git_mirrors", None) or {})
        values: dict[str, Any] = {
            "index_url": os.environ.get("IMAGEBUILD_WHEEL_INDEX") or None,
            "pypi_url": os.environ.get("IMAGEBUILD_PYPI_INDEX") or None,
            "cache_dir": Path(os.environ["IMAGEBUILD_CACHE"])
            if os.environ.get("IMAGEBUILD_CACHE") else None,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(git_mirrors=mirrors, **values)


def parse_mirrors(text: str) -> list[tuple[str, str]]:
    """``FROM=TO`` pairs separated by ';' or newlines."""
    pairs = []
    for item in filter(None, (part.strip() for part in re.split(r"[;\n]", text))):
        source, sep, target = item.partition("=")
        if not sep or not source or not target:
            raise LockError(f"git mirror {item!r}: expected FROM=TO, e.g. "
                            "https://github.com/=https://git.mirror.example/")
        pairs.append((source, target))
    return pairs


def mirrored(url: str, mirrors: Mapping[str, str]) -> str:
    for source, target in sorted(mirrors.items(), key=lambda kv: -len(kv[0])):
        if url.startswith(source):
            return target + url[len(source):]
    return url
