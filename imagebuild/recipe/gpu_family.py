"""Which of AMD's per-family ROCm wheel indexes serves a recipe's GPU targets.

ROCm built by TheRock ships as Python wheels on one PEP 503 index per GPU family
(https://github.com/ROCm/TheRock/blob/main/RELEASES.md, "Index page listing"): each index
holds a complete, self-consistent set of rocm and torch wheels, with device code for every
target of its family. A recipe names targets; the family, and so the index, follows.
"""

from __future__ import annotations

#: GPU target -> family index name (TheRock RELEASES.md and SUPPORTED_GPUS.md).
FAMILIES: dict[str, str] = {
    "gfx942": "gfx94X-dcgpu",    # MI300A, MI300X
    "gfx950": "gfx950-dcgpu",    # MI350X, MI355X
    "gfx1100": "gfx110X-all",
    "gfx1101": "gfx110X-all",
    "gfx1102": "gfx110X-all",
    "gfx1103": "gfx110X-all",
    "gfx1151": "gfx1151",
    "gfx1200": "gfx120X-all",
    "gfx1201": "gfx120X-all",
}

#: Targets with no release-ready family index, and what to use instead.
NOT_RELEASED: dict[str, str] = {
    "gfx90a": "MI250X (LUMI, Frontier) has no release-ready TheRock wheels; the 7.2 line "
              "(recipes/rocm-7.2.4.yaml, ROCm from the base image) is the newest for it",
}


class FamilyError(ValueError):
    """The targets map to no family index, or to more than one."""


def family_of(targets: tuple[str, ...] | list[str]) -> str:
    """The one family index serving every target (feature suffixes like :xnack- ignored)."""
    if not targets:
        raise FamilyError("needs gpu_targets: the GPU family selects the wheel index")
    families: dict[str, list[str]] = {}
    for target in targets:
        base = target.split(":", 1)[0]
        if base in NOT_RELEASED:
            raise FamilyError(f"{target}: {NOT_RELEASED[base]}")
        if base not in FAMILIES:
            raise FamilyError(f"{target}: no ROCm wheel index is known for it (known: "
                              f"{', '.join(sorted(FAMILIES))})")
        families.setdefault(FAMILIES[base], []).append(target)
    if len(families) > 1:
        listed = "; ".join(f"{family}: {', '.join(ts)}" for family, ts in families.items())
        raise FamilyError(f"the targets span several family indexes ({listed}); one image "
                          "installs one family's wheels: build one image per family")
    return next(iter(families))
