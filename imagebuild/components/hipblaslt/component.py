"""hipBLASLt: its recipe section and rules."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ProblemAt,
    RecipeData,
    SectionData,
    git_source,
    needs_rocm,
    refused_with_rocm_wheels,
    require_keys,
)
from imagebuild.lock.model import GitPin, Pin
from imagebuild.recipe import grammar
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.recipe.rocm_layout import release
from imagebuild.recipe.spec import GIT_REF, REPOSITORY, Bool, Obj, Str

NAME = "hipblaslt"
#: Its source's key in the lock's [tool.imagebuild.sources].
LOCK_KEY = "hipblaslt"


@dataclass(frozen=True)
class HipBlasLt:
    enabled: bool
    source: GitSource
    #: Subdirectory of the repository holding hipBLASLt (rocm-libraries monorepo layout).
    subdir: str
    clients: bool
    #: Keep hipblaslt-bench, utilities/find_exact.py and the logic YAMLs for offline tuning.
    tuning_kit: bool
    #: install.sh --logic-yaml-filter: only the logic files matching this glob get kernels.
    logic_filter: str | None = None
    #: False: install.sh --skip_rocroller (HIPBLASLT_ENABLE_ROCROLLER=OFF).
    rocroller: bool = True

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: asdict(self.source) if self.enabled else None}


def section(recipe: Recipe) -> HipBlasLt | None:
    """The recipe's hipBLASLt section when it builds hipBLASLt."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, HipBlasLt) and found.enabled else None


SPEC = Obj(fields={
    "enabled": Bool(),
    "repository": REPOSITORY,
    "ref": GIT_REF,
    "subdir": Str("a relative directory inside the repository", grammar.SUBDIR),
    "clients": Bool(),
    "tuning_kit": Bool(),
    "logic_filter": Str(
        "a logic-file glob relative to hipBLASLt's Logic directory, like gfx942/*/* "
        "(install.sh --logic-yaml-filter; ROCm >= 6.4): kernels for the logic files it "
        "leaves out are not built", grammar.LOGIC_FILTER),
    "rocroller": Bool(),
})
DEFAULTS = {"enabled": False, "subdir": ".", "clients": True, "tuning_kit": True,
            "rocroller": True}

#: The first ROCm release whose hipBLASLt install.sh takes each build option. ROCm/hipBLASLt
#: added --logic-yaml-filter (-> Tensile_LOGIC_FILTER) on develop in #1007 (2024-09-25),
#: after the rocm-6.3 release branch was cut (release/rocm-rel-6.3.0.1 has no such option),
#: so 6.4 is the first release line with it; the rocm-libraries monorepo's
#: projects/hipblaslt/install.sh keeps it (-> TENSILELITE_LOGIC_FILTER). --skip_rocroller
#: (HIPBLASLT_ENABLE_ROCROLLER=OFF) exists from 7.0, when rocRoller joined hipBLASLt; 6.x
#: builds no rocRoller. install.sh's getopt stops the build on an option it does not know.
OPTION_SINCE = {"logic_filter": (6, 4), "rocroller": (7, 0)}


def rules(hip: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem)
    require_keys(NAME, hip, ("repository", "ref"), problem)
    if not recipe["gpu_targets"]:
        problem((NAME, "enabled"), "needs gpu_targets to list the GPUs to build hipBLASLt for "
                "(building for every target takes hours)")
    if recipe["rocm"] is not None:
        _option_checks(hip, recipe["rocm"], problem)
    # The libraries wheel ships the libhipblaslt that torch preloads through
    # rocm_sdk.initialize_process (TheRock docs/packaging/python_packaging.md): a source
    # build would be a second copy nothing loads, unless it replaced a file inside a
    # wheel's directory, which `rocm-sdk test` and the wheel's RECORD would disown.
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "torch loads the libhipblaslt of the rocm-sdk-libraries wheel, so "
                             "a source build would go unused (`imagebuild tune gemm` then "
                             "tunes with TunableOp alone)")


def _option_checks(hip: SectionData, rocm: str, problem: ProblemAt) -> None:
    """Refuse a hipBLASLt build option the recipe's release cannot take."""
    line = release(rocm)
    asked = {"logic_filter": hip.get("logic_filter") is not None,
             "rocroller": hip.get("rocroller") is False}
    for key, since in OPTION_SINCE.items():
        if asked[key] and line < since:
            first = ".".join(map(str, since))
            what = ("install.sh has no --logic-yaml-filter before it (6.x's -l/--logic, "
                    "Tensile_LOGIC, picks a whole logic set such as asm_full, not a file "
                    "filter)" if key == "logic_filter" else
                    "hipBLASLt builds no rocRoller before it (and its install.sh has no "
                    "--skip_rocroller)")
            problem((NAME, key), f"needs ROCm >= {first}; this recipe is ROCm {rocm}: "
                    f"{what}. Remove the key")


def read(hip: SectionData, recipe: RecipeData) -> HipBlasLt:
    return HipBlasLt(enabled=hip["enabled"], source=git_source(hip), subdir=hip["subdir"],
                     clients=hip["clients"], tuning_kit=hip["tuning_kit"],
                     logic_filter=hip.get("logic_filter"), rocroller=hip["rocroller"])


def pins(hip: HipBlasLt, recipe: Recipe) -> tuple[Pin, ...]:
    return (GitPin(LOCK_KEY, hip.source),)


COMPONENT = Component(
    name=NAME, title="hipBLASLt", folder=Path(__file__).resolve().parent,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins,
    always_recorded=True, needs_build_packages=True,
)
