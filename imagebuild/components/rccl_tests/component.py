"""ROCm/rccl-tests: the recipe section and its rules."""

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
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.recipe.spec import GIT_REF, REPOSITORY, Bool, Obj

NAME = "rccl_tests"
#: Its source's key in the lock's [tool.imagebuild.sources].
LOCK_KEY = "rccl-tests"


@dataclass(frozen=True)
class RcclTests:
    """ROCm/rccl-tests at a commit: the ``*_perf`` collective benchmarks, built for the
    recipe's gpu_targets against the image's RCCL."""

    enabled: bool
    source: GitSource

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: asdict(self.source)}


def section(recipe: Recipe) -> RcclTests | None:
    """The recipe's rccl-tests section when it builds them."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, RcclTests) and found.enabled else None


SPEC = Obj(
    description="ROCm/rccl-tests, the collective benchmarks (all_reduce_perf and the other "
                "*_perf), from a repository pinned by commit: built for gpu_targets against "
                "the image's RCCL into /opt/rccl-tests/bin",
    fields={
        "enabled": Bool(),
        "repository": REPOSITORY,
        "ref": GIT_REF,
    })
DEFAULTS = {"enabled": False}


def rules(tests: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem)
    require_keys(NAME, tests, ("repository", "ref"), problem)
    if recipe["rocm"] is not None and not recipe["gpu_targets"]:
        problem((NAME, "enabled"), "needs gpu_targets to list the GPUs to build the "
                "benchmarks for (hipcc's default target is the build machine's GPU)")
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "the rccl-tests stage compiles with the base image's hipcc "
                             "against its RCCL (rocm_prefix), which such a base does not have")


def read(tests: SectionData, recipe: RecipeData) -> RcclTests:
    return RcclTests(enabled=tests["enabled"], source=git_source(tests))


def pins(tests: RcclTests, recipe: Recipe) -> tuple[Pin, ...]:
    return (GitPin(LOCK_KEY, tests.source),)


COMPONENT = Component(
    name=NAME, title="rccl-tests", folder=Path(__file__).resolve().parent,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins,
)
