"""Megatron-LM: the recipe section and its rules, what the lock pins for it, and its plan
(the megatron stage, its python- and final-stage steps, manifest, SBOM and size parts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ComponentPlan,
    EnvVar,
    PlanContext,
    ProblemAt,
    RecipeData,
    SectionData,
    Stage,
)
from imagebuild.components.shared import (
    SOURCE_BUILD_PACKAGES,
    git_source,
    pinned_source,
    python_dev_package,
    require_keys,
)
from imagebuild.lock.model import GitPin, Pin, PinnedSource
from imagebuild.recipe.fields import GIT_REF, REPOSITORY, Bool, Obj, Seq, Str, requirement
from imagebuild.recipe.model import GitSource, Recipe

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


FOLDER = Path(__file__).resolve().parent
#: Megatron-LM's checkout in the image (the ReFrame check's MEGATRON_LM_DIR).
PREFIX = "/opt/megatron-lm"
#: The build-time check that Megatron's dataset helpers are built, importable and up to date
#: for its run-time make (staged in the build context, bind-mounted into the final stage).
CHECK = "megatron-check.py"
#: At run time Megatron's rank 0 runs its dataset Makefile again (megatron.core.datasets.
#: utils.compile_helpers): make, and python3-config for the extension suffix, must be there
#: for it to find the built helpers up to date instead of failing to compile them.
RUNTIME_PACKAGES = ("make",)


@dataclass(frozen=True)
class MegatronPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    prefix: str
    #: The venv interpreter's python<X.Y>-config, which Megatron's Makefile calls as
    #: python3-config: the dataset helpers get the venv's extension suffix.
    python_config: str
    #: The OS package holding it and the interpreter's headers (Debian and Ubuntu naming).
    python_dev_package: str
    check: str = CHECK

    @property
    def datasets_dir(self) -> str:
        return f"{self.prefix}/megatron/core/datasets"



def planned(parts: Mapping[str, ComponentPlan]) -> MegatronPlan | None:
    """Megatron-LM's plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    recipe, megatron, lock = context.recipe, context.section, context.lock
    locked = lock.git(LOCK_KEY) if lock else None
    repository, revision = pinned_source(megatron.source, locked)
    values = MegatronPlan(
        repository=repository, revision=revision, ref=megatron.source.ref, prefix=PREFIX,
        python_config=f"/usr/bin/python{recipe.python}-config",
        python_dev_package=python_dev_package(recipe))
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("megatron", "stage.j2", "toolchain + Megatron-LM, dataset helpers compiled",
                    "Megatron repository/commit, the venv", on_venv=True),
        steps=("python.j2", "final.j2"), scripts=((CHECK, FOLDER / "check.py"),),
        # The dataset helpers are compiled against the venv's Python: its headers.
        build_packages=(*SOURCE_BUILD_PACKAGES, values.python_dev_package),
        runtime_packages=(*RUNTIME_PACKAGES, values.python_dev_package),
        env=(EnvVar("MEGATRON_LM_DIR", PREFIX),),
        # "dir", "version" and "dataset_helpers" are added by the final stage's check.
        manifest={"enabled": True, **({
            "repository": locked.repository, "ref": locked.ref, "commit": locked.commit,
            "pretrain_gpt": f"{PREFIX}/pretrain_gpt.py"} if locked else {})},
        sources=(PinnedSource(NAME, "megatron-lm", locked),) if locked else (),
        sizes=((PREFIX, "Megatron-LM"),))


COMPONENT = Component(
    name=NAME, title="Megatron-LM", folder=FOLDER, plan=plan,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, requirements=requirements,
    precedes=(("schema", "rccl_tests"), ("final", "transformer_engine")),
)
