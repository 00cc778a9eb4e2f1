"""The GPU targets a recipe may name: LLVM's AMDGPU processors that ROCm's compilers build
for, so that a typo (``gfx9999``, ``gfx924``) stops at the recipe, not inside an hour of
hipBLASLt compilation.

Source: LLVM's AMDGPU backend, "Processors" table (https://llvm.org/docs/AMDGPUUsage.html#processors),
GFX9 and later (ROCm 6 and 7 build for none older).
"""

from __future__ import annotations

import difflib

KNOWN_GPU_TARGETS: tuple[str, ...] = (
    # GFX9 / CDNA: Vega, MI50/60 (gfx906), MI100 (gfx908), MI200 (gfx90a), MI300 (gfx942),
    # MI350 (gfx950); gfx940 and gfx941 were MI300's pre-release targets
    "gfx900", "gfx902", "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c",
    "gfx940", "gfx941", "gfx942", "gfx950",
    # GFX10 / RDNA 1-2
    "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031", "gfx1032", "gfx1033",
    "gfx1034", "gfx1035", "gfx1036",
    # GFX11 / RDNA 3, 3.5
    "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153",
    # GFX12 / RDNA 4
    "gfx1200", "gfx1201",
)


def unknown_target(target: str) -> str | None:
    """Why a gfx-looking ``target`` (feature flags allowed: gfx90a:xnack+) is not a known
    processor, with the nearest one; None for a known one or for something else entirely
    (the pattern's message says what a target looks like)."""
    processor = target.split(":", 1)[0]
    if processor in KNOWN_GPU_TARGETS or not processor.startswith("gfx"):
        return None
    hint = difflib.get_close_matches(processor, KNOWN_GPU_TARGETS, n=1)
    return ("is not an AMD GPU target LLVM knows"
            + (f"; did you mean {hint[0]!r}?" if hint else "")
            + " (MI250X gfx90a, MI300A/MI300X gfx942, MI355X gfx950)")
