"""TransformerEngine for ROCm: the recipe section and its rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ProblemAt,
    RecipeData,
    SectionData,
    require_keys,
)
from imagebuild.lock.model import IndexSdist, IndexWheels, Pin
from imagebuild.recipe import grammar
from imagebuild.recipe.model import Recipe
from imagebuild.recipe.spec import Bool, Obj, Str, exact_version

NAME = "transformer_engine"
#: repo.radeon.com's TransformerEngine for ROCm (ROCm/TransformerEngine README, "from ROCm
#: 7.0 ... manylinux wheels"): the Python package and the common library as wheels, the
#: PyTorch extension as a source archive compiled against the installed torch.
WHEELS = ("transformer-engine", "transformer-engine-rocm")
TORCH_SDIST = "transformer-engine-torch"


@dataclass(frozen=True)
class TransformerEngine:
    enabled: bool
    version: str = ""

    def wheel_pins(self) -> tuple[tuple[str, str], ...]:
        return tuple((name, self.version) for name in WHEELS)

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: self.version}


def section(recipe: Recipe) -> TransformerEngine | None:
    """The recipe's TransformerEngine section when the image has it."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, TransformerEngine) and found.enabled else None


SPEC = Obj(
    description="TransformerEngine for ROCm from the wheel index: the transformer_engine and "
                "transformer_engine_rocm wheels, and the transformer_engine_torch source "
                "archive, built in the image against its torch for gpu_targets",
    fields={
        "enabled": Bool(),
        "version": Str("a TransformerEngine release on the index, like 2.2.0",
                       grammar.VERSION_TEXT, check=exact_version),
    })
DEFAULTS = {"enabled": False}


def rules(engine: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    require_keys(NAME, engine, ("version",), problem)
    for name in (*WHEELS, TORCH_SDIST):
        if name in recipe["wheels"]["packages"]:
            problem(("wheels", "packages", name), "set by transformer_engine.version: leave "
                    "TransformerEngine's packages out of wheels.packages")


def read(engine: SectionData, recipe: RecipeData) -> TransformerEngine:
    return TransformerEngine(enabled=engine["enabled"], version=str(engine.get("version", "")))


def pins(engine: TransformerEngine, recipe: Recipe) -> tuple[Pin, ...]:
    """The index's wheels and the extension's source archive, of the recipe's version."""
    return (IndexWheels(engine.wheel_pins()), IndexSdist(TORCH_SDIST, engine.version))


COMPONENT = Component(
    name=NAME, title="TransformerEngine", folder=Path(__file__).resolve().parent,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins,
)
