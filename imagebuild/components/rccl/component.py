"""RCCL pinned apart from the base image: the recipe section and its rules, what the lock
pins for it, and its plan (the rccl stage, its final-stage steps, manifest, SBOM and size
parts). The base image's RCCL stays where it is; the image puts the pinned one first on the
loader path and in the loader cache, and its check proves every consumer resolves it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
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
from imagebuild.components.shared import (
    SOURCE_BUILD_PACKAGES,
    git_source,
    needs_rocm,
    pinned_source,
    refused_with_rocm_wheels,
    require_keys,
)
from imagebuild.lock.model import GitPin, Pin, PinnedSource
from imagebuild.recipe.fields import GIT_REF, REPOSITORY, Bool, Obj
from imagebuild.recipe.model import GitSource, Recipe

NAME = "rccl"
#: Its source's key in the lock's [tool.imagebuild.sources].
LOCK_KEY = "rccl"


@dataclass(frozen=True)
class Rccl:
    """RCCL (ROCm/rccl or a fork) at a commit, built for gpu_targets."""

    enabled: bool
    source: GitSource

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: asdict(self.source)}


def section(recipe: Recipe) -> Rccl | None:
    """The recipe's RCCL section when the image pins its own RCCL."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, Rccl) and found.enabled else None


SPEC = Obj(
    description="RCCL pinned apart from the base image's, from a repository at a commit the "
                "lock pins: built for gpu_targets into /opt/rccl, first on the loader path "
                "and in the loader cache; the build checks that torch, rccl-tests and the "
                "image's own libraries resolve it",
    fields={"enabled": Bool(), "repository": REPOSITORY, "ref": GIT_REF})
DEFAULTS = {"enabled": False}


def rules(rccl: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem, ": RCCL is compiled with the image's hipcc")
    require_keys(NAME, rccl, ("repository", "ref"), problem)
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "torch loads the SDK wheels' RCCL, which a build against the base "
                             "image's ROCm cannot replace")


def read(rccl: SectionData, recipe: RecipeData) -> Rccl:
    return Rccl(enabled=rccl["enabled"], source=git_source(rccl))


def pins(rccl: Rccl, recipe: Recipe) -> tuple[Pin, ...]:
    return (GitPin(LOCK_KEY, rccl.source),)


FOLDER = Path(__file__).resolve().parent
PREFIX = "/opt/rccl"
#: The build-time check that every consumer resolves the pinned librccl.so.1.
CHECK = "rccl-check.py"
#: Memory one compile job may take (jobs = memory / this, at most the CPUs): RCCL's device
#: code compiles take several GB each. A rule of thumb, as for hipBLASLt.
JOB_MEMORY_GIB = 4


@dataclass(frozen=True)
class RcclPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    targets: tuple[str, ...]
    rocm_prefix: str
    prefix: str = PREFIX
    check: str = CHECK
    job_memory_gib: int = JOB_MEMORY_GIB

    @property
    def library_dir(self) -> str:
        return f"{self.prefix}/lib"


def planned(parts: Mapping[str, ComponentPlan]) -> RcclPlan | None:
    """RCCL's plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    recipe, rccl, lock = context.recipe, context.section, context.lock
    locked = lock.git(LOCK_KEY) if lock else None
    repository, revision = pinned_source(rccl.source, locked)
    values = RcclPlan(repository=repository, revision=revision, ref=rccl.source.ref,
                      targets=recipe.gpu_targets, rocm_prefix=recipe.rocm_prefix)
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("rccl", "stage.j2", "toolchain + RCCL built for the GPU targets",
                    "RCCL repository/commit, GPU targets"),
        steps=("final.j2",), scripts=((CHECK, FOLDER / "check.py"),),
        build_packages=(*SOURCE_BUILD_PACKAGES, "cmake"),
        # On the loader path, which comes before the loader cache and a consumer's RUNPATH
        # (not its DT_RPATH: the check finds those), and in the cache: every consumer that
        # names librccl.so.1 finds this one.
        library_path=(values.library_dir,),
        loader_dirs=(("rccl", values.library_dir),),
        linked_files=(f"{values.library_dir}/librccl.so.1",),
        # "consumers" (each one and the librccl.so.1 it resolves) is added by the final
        # stage's check.
        manifest={"enabled": True, "library": f"{values.library_dir}/librccl.so.1",
                  "gpu_targets": list(values.targets), **({
                      "repository": locked.repository, "ref": locked.ref,
                      "commit": locked.commit} if locked else {})},
        sources=(PinnedSource(NAME, "rccl", locked),) if locked else (),
        sizes=((PREFIX, "RCCL"),))


COMPONENT = Component(
    name=NAME, title="RCCL", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
    precedes=(("schema", "rccl_tests"),),
)
