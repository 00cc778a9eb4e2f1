"""Megatron-LM: the recipe section and its rules."""

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
    require_keys,
)
from imagebuild.lock.model import GitPin, Pin
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.recipe.spec import GIT_REF, REPOSITORY, Bool, Obj, Seq, Str, requirement

NAME = "megatron"
#: Its source's key in the lock's [tool.imagebuild.sources].
LOCK_KEY = "megatron"


@dataclass(frozen=True)
class Megatron:
    """Megatron-LM at a commit (ROCm/Megatron-LM, NVIDIA/Megatron-LM or a fork such as
    swiss-ai/Megatron-LM) and the PyPI projects it imports, locked with the wheels."""

    enabled: bool
    source: GitSource
    requirements: tuple[str, ...] = ()

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: asdict(self.source)}


def section(recipe: Recipe) -> Megatron | None:
    """The recipe's Megatron-LM section when the image has it."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, Megatron) and found.enabled else None


SPEC = Obj(
    description="Megatron-LM, the training framework, from a repository pinned by commit: "
                "installed at /opt/megatron-lm (MEGATRON_LM_DIR, on the venv's import path) "
                "with its dataset helpers compiled at build time",
    fields={
        "enabled": Bool(),
        "repository": REPOSITORY,
        "ref": GIT_REF,
        "pypi": Seq(Str("a PEP 508 requirement Megatron-LM imports, like einops",
                        check=requirement)),
    })
DEFAULTS = {"enabled": False, "pypi": []}


def rules(megatron: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    # Plain Python and C++: a CPU image may carry it (no ROCm release needed).
    require_keys(NAME, megatron, ("repository", "ref"), problem)


def read(megatron: SectionData, recipe: RecipeData) -> Megatron:
    return Megatron(enabled=megatron["enabled"], source=git_source(megatron),
                    requirements=tuple(megatron["pypi"]))


def requirements(megatron: Megatron) -> tuple[str, ...]:
    """What Megatron imports, locked like every other wheel."""
    return megatron.requirements


def pins(megatron: Megatron, recipe: Recipe) -> tuple[Pin, ...]:
    return (GitPin(LOCK_KEY, megatron.source),)


COMPONENT = Component(
    name=NAME, title="Megatron-LM", folder=Path(__file__).resolve().parent,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, requirements=requirements,
    precedes=(("schema", "rccl_tests"), ("final", "transformer_engine")),
)
