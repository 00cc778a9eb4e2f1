"""Which of AMD's ROCm wheel indexes serves a recipe's GPU targets, and how.

ROCm built by TheRock ships as Python wheels on PEP 503 indexes, in two layouts:

- multi-arch (the 7.14 and 10.x release lines): one index for every GPU, device code split
  from the host code into per-target packages that extras select: ``torch[device-gfx942]``
  pulls ``amd-torch-device-gfx942`` and, through ``rocm[device-gfx942]``,
  ``rocm-sdk-device-gfx942`` (AMD's install pages for 7.14.0 and 10.x, e.g. "pip install
  --index-url https://stable.repo.amd.com/rocm/whl-next/ torch[device-gfx942]==..."; the
  ``device-<target>`` extras of the rocm sdist: ROCm/TheRock
  build_tools/packaging/python, ``build_per_target_extras``);
- per family (legacy): one complete index per GPU family
  (https://github.com/ROCm/TheRock/blob/main/RELEASES.md, "Index page listing"), each with
  device code for every target of its family. The family, and so the index, follows from
  the targets.
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

#: Targets TheRock builds but does not release-test, and why a recipe must say it accepts
#: them (recipe key accept_untested_targets). gfx90a is "Build Passing" in TheRock's
#: SUPPORTED_GPUS.md, and MI250 users report torch 2.11 working and 2.12 failing on 7.14
#: (https://github.com/ROCm/pytorch/issues/3518).
UNTESTED: dict[str, str] = {
    "gfx90a": "MI250X/MI250 (LUMI, Frontier) is 'Build Passing', not release-tested, on the "
              "TheRock lines (7.14, 10.x), and torch 2.12 on 7.14 fails on MI250 where 2.11 "
              "worked (ROCm/pytorch#3518); the 7.2.x line (recipes/rocm-7.2.4.yaml, ROCm "
              "from the base image) is the tested one for it",
}
#: The per-family index of an accepted untested target (nightly index names, e.g.
#: https://rocm.nightlies.amd.com/v2/gfx90X-dcgpu/).
UNTESTED_FAMILIES: dict[str, str] = {"gfx90a": "gfx90X-dcgpu"}

#: Targets with a device extra on the multi-arch indexes: the family targets above and the
#: Ryzen AI ones AMD's 7.14.0 install pages name (device-gfx1150, -gfx1152, -gfx1153).
MULTI_ARCH_TARGETS = frozenset(FAMILIES) | {"gfx1150", "gfx1152", "gfx1153"} | set(UNTESTED)

#: Release line -> its multi-arch index (AMD's install pages: 7.14.0 at repo.amd.com's
#: whl-multi-arch, 10.0 and 10.1 at stable.repo.amd.com's whl-next; "TheRock transition
#: guide", https://rocm.docs.amd.com/en/latest/about/transition-guide-TheRock.html).
MULTI_ARCH_INDEXES: tuple[tuple[str, str], ...] = (
    ("7.14.", "https://repo.amd.com/rocm/whl-multi-arch/"),
    ("10.", "https://stable.repo.amd.com/rocm/whl-next/"),
)


def multi_arch_index(rocm: str) -> str | None:
    """The multi-arch index of a TheRock release line, None for older lines."""
    return next((url for prefix, url in MULTI_ARCH_INDEXES if rocm.startswith(prefix)), None)


def untested(targets: tuple[str, ...] | list[str], accepted: tuple[str, ...] | list[str]
             ) -> list[str]:
    """Why each target of ``targets`` that TheRock does not release-test, and the recipe did
    not accept, is refused."""
    refused = []
    for target in targets:
        base = target.split(":", 1)[0]
        if base in UNTESTED and base not in accepted:
            refused.append(f"{target}: {UNTESTED[base]}")
    return refused


def device_extras(targets: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The multi-arch extras that select device code for ``targets``: one per base target
    (feature suffixes like :xnack- share the target's code objects)."""
    extras = []
    for target in targets:
        base = target.split(":", 1)[0]
        if base not in MULTI_ARCH_TARGETS:
            raise FamilyError(f"{target}: no device extra is known for it on the multi-arch "
                              f"indexes (known: {', '.join(sorted(MULTI_ARCH_TARGETS))})")
        if f"device-{base}" not in extras:
            extras.append(f"device-{base}")
    if not extras:
        raise FamilyError("needs gpu_targets: each target selects its device extra")
    return tuple(sorted(extras))


class FamilyError(ValueError):
    """The targets map to no family index, or to more than one."""


def family_of(targets: tuple[str, ...] | list[str]) -> str:
    """The one family index serving every target (feature suffixes like :xnack- ignored);
    untested targets are the caller's to refuse (``untested``)."""
    if not targets:
        raise FamilyError("needs gpu_targets: the GPU family selects the wheel index")
    families: dict[str, list[str]] = {}
    for target in targets:
        base = target.split(":", 1)[0]
        family = FAMILIES.get(base) or UNTESTED_FAMILIES.get(base)
        if family is None:
            raise FamilyError(f"{target}: no ROCm wheel index is known for it (known: "
                              f"{', '.join(sorted(FAMILIES))})")
        families.setdefault(family, []).append(target)
    if len(families) > 1:
        listed = "; ".join(f"{family}: {', '.join(ts)}" for family, ts in families.items())
        raise FamilyError(f"the targets span several family indexes ({listed}); one image "
                          "installs one family's wheels: build one image per family")
    return next(iter(families))
