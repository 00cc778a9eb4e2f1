"""TransformerEngine for ROCm: the recipe section and its rules, what the lock pins for it
(the index's wheels and the extension's source archive), and its plan (the
transformer-engine stage, its final-stage steps, manifest and SBOM part)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ComponentPlan,
    PlanContext,
    ProblemAt,
    RecipeData,
    SectionData,
    Stage,
)
from imagebuild.components.shared import SOURCE_BUILD_PACKAGES, python_dev_package, require_keys
from imagebuild.lock.model import IndexSdist, IndexWheels, Pin, PinnedSource
from imagebuild.recipe import grammar
from imagebuild.recipe.fields import Bool, Obj, Str, exact_version
from imagebuild.recipe.model import Recipe

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


FOLDER = Path(__file__).resolve().parent
#: The build-time check of TransformerEngine's built PyTorch extension (staged in the
#: build context, bind-mounted into the final stage).
CHECK = "transformer-engine-check.py"
#: Memory one compile job of the extension may take (MAX_JOBS = memory / this, at most the
#: CPUs): hipcc compiles of torch extensions take several GB each. A rule of thumb.
JOB_MEMORY_GIB = 4


@dataclass(frozen=True)
class TransformerEnginePlan:
    version: str
    #: The locked source archive of the PyTorch extension (None when unlocked).
    sdist_url: str | None
    sdist_sha256: str | None
    #: ``;``-joined GPU targets for NVTE_ROCM_ARCH and PYTORCH_ROCM_ARCH; "" on a CPU image.
    targets: str
    rocm_prefix: str | None
    wheel_dir: str = "/opt/transformer-engine-wheels"
    job_memory_gib: int = JOB_MEMORY_GIB
    check: str = CHECK

    @property
    def sdist_file(self) -> str:
        return f"/tmp/{TORCH_SDIST}-{self.version}.tar.gz"



def planned(parts: Mapping[str, ComponentPlan]) -> TransformerEnginePlan | None:
    """TransformerEngine's plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    recipe, engine, lock = context.recipe, context.section, context.lock
    sdist = lock.sdist(TORCH_SDIST) if lock else None
    values = TransformerEnginePlan(
        version=engine.version, sdist_url=sdist.url if sdist else None,
        sdist_sha256=sdist.sha256 if sdist else None, targets=";".join(recipe.gpu_targets),
        rocm_prefix=None if recipe.cpu_only else recipe.rocm_prefix)
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("transformer-engine", "stage.j2",
                    "toolchain + TransformerEngine's torch extension",
                    "its locked source archive, the venv, GPU targets", on_venv=True),
        steps=("final.j2",), scripts=((CHECK, FOLDER / "check.py"),),
        # The interpreter's headers (the extension is compiled against the venv's Python)
        # and curl (the stage fetches the archive).
        build_packages=(*SOURCE_BUILD_PACKAGES, python_dev_package(recipe), "curl"),
        # "torch_extension" (the built files and what they link) is added by the final
        # stage's check.
        manifest={"enabled": True, "version": values.version,
                  "gpu_targets": values.targets.split(";") if values.targets else [],
                  "torch_extension_source": {"url": values.sdist_url,
                                             "sha256": values.sdist_sha256}},
        sources=(PinnedSource(NAME, TORCH_SDIST, sdist),) if sdist else ())


COMPONENT = Component(
    name=NAME, title="TransformerEngine", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
)
