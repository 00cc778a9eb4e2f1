"""The image manifest written at build time (/opt/imagebuild/manifest.json).

Keys read here (docs/validate-report.md has the full schema):
  recipe, input_hash, rocm_version (null for CPU-only images), python_version,
  wheels {distribution name: version}, gpu_targets [gfx...],
  hipblaslt {enabled, commit, bench}, network_plugin {enabled, kind, library}.
Unknown keys are ignored; a missing key skips the comparison that needs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def load_manifest(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(manifest, None), or (None, why there is none); a broken manifest is a problem
    the environment check reports, not a crash."""
    file = Path(path)
    if not file.exists():
        return None, f"no manifest at {path} (set IMAGEBUILD_MANIFEST or --manifest)"
    try:
        data = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        return None, f"manifest {path} is unreadable: {exc}"
    if not isinstance(data, dict):
        return None, f"manifest {path}: expected a JSON object"
    return data, None


def section(manifest: dict[str, Any] | None, key: str) -> dict[str, Any]:
    value = (manifest or {}).get(key)
    return value if isinstance(value, dict) else {}
