"""What a recipe on TheRock's ROCm must say: the layout and family of its wheel index when
ROCm comes from wheels, and the GPU targets TheRock builds but does not release-test (on its
wheels and on its Core SDK base images)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from imagebuild.recipe.gpu_family import (
    FamilyError,
    device_extras,
    family_of,
    multi_arch_index,
    untested,
)
from imagebuild.recipe.located import KeyPath
from imagebuild.recipe.model import WheelLayout

ProblemAt = Callable[[KeyPath, str], None]


def wheels_layout(data: dict[str, Any], index_url: str | None
                   ) -> tuple[WheelLayout, str | None]:
    """The layout of a ROCm-from-wheels recipe's index, and the index: ``{family}`` in
    wheels.index_url asks for the legacy per-family layout; otherwise the 7.14 and 10.x
    lines read their multi-arch index (the recipe's index_url, a mirror of it, or AMD's)."""
    rocm = data["rocm"] or ""
    if index_url is not None:
        return ("per-family" if "{family}" in index_url else "multi-arch"), index_url
    default = multi_arch_index(rocm)
    return ("multi-arch", default) if default else ("per-family", None)


def wheels_targets(data: dict[str, Any], layout: WheelLayout,
                    problem: ProblemAt) -> tuple[str | None, tuple[str, ...]]:
    """Checks of a recipe whose ROCm comes from wheels; returns its GPU family index
    (per-family layout) or the device extras of its targets (multi-arch)."""
    _wheels_checks(data, problem)
    untested_checks(data, "rocm_from: wheels", problem)
    targets = data["gpu_targets"]
    try:
        if layout == "multi-arch":
            return None, device_extras(targets)
        return family_of(targets), ()
    except FamilyError as exc:
        problem(("gpu_targets",), f"rocm_from: wheels: {exc}")
        return None, ()


def untested_checks(data: dict[str, Any], where: str,
                     problem: ProblemAt) -> None:
    """gfx90a and the other targets TheRock does not release-test, unless accepted."""
    targets = data["gpu_targets"]
    for target in data["accept_untested_targets"]:
        if target not in targets:
            problem(("accept_untested_targets",),
                    f"{target} is not in gpu_targets ({', '.join(targets) or 'none'})")
    for why in untested(targets, data["accept_untested_targets"]):
        problem(("gpu_targets",), f"{where}: {why}; to build it anyway, list the target "
                "under accept_untested_targets")


def _wheels_checks(data: dict[str, Any], problem: ProblemAt) -> None:
    """What a recipe whose ROCm comes from wheels cannot ask for."""
    if data["rocm"] is None:
        problem(("rocm_from",), "wheels needs rocm: the ROCm SDK version the wheels pin")
    if "rocm" in data["wheels"]["packages"]:
        problem(("wheels", "packages", "rocm"),
                "leave the selector out: the lock adds rocm[libraries]==<rocm> itself")
