"""What ``imagebuild validate`` runs the checks in, and which GPUs this host has.

A target is this Python environment, an image reference (a recipe name resolves to its
latest build), a .sif file (apptainer/singularity) or a .sqsh file (enroot).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import ValidateError


@dataclass(frozen=True)
class Target:
    """What to validate: the running environment, an image reference, or an image file."""

    kind: str  # "environment", "image", "sif" or "sqsh"
    ref: str | None = None
    recipe: str | None = None


def resolve_target(target: str | None, project: Path | None = None) -> Target:
    """No target: this environment. A .sif or .sqsh file: that file. A recipe name or
    file: its latest build (imagebuild.images). Anything else: an image reference."""
    if not target:
        return Target("environment")
    if target.endswith((".sif", ".sqsh", ".squashfs")):
        path = Path(target).resolve()
        if not path.is_file():
            raise ValidateError(f"{target}: no such file",
                                hint="build and squash it first (imagebuild build RECIPE "
                                     "--squash sqsh,sif), or give a path the node can read")
        return Target("sif" if target.endswith(".sif") else "sqsh", str(path))
    from imagebuild.images import resolve_target as resolve_image

    resolved = resolve_image(target, project)
    return Target("image", resolved.image, recipe=resolved.recipe.name if resolved.recipe else None)


def detect_gpu_kind(dev: Path = Path("/dev"), proc: Path = Path("/proc")) -> str:
    if (dev / "kfd").exists():
        return "rocm"
    if (dev / "nvidiactl").exists() or (proc / "driver" / "nvidia").exists():
        return "nvidia"
    return "none"

