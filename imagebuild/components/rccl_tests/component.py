"""ROCm/rccl-tests: the recipe section and its rules, what the lock pins for it, and its plan
(the rccl-tests stage, its final-stage steps, manifest, SBOM and size parts)."""

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


FOLDER = Path(__file__).resolve().parent
#: rccl-tests' install tree; its benchmarks are in bin/.
PREFIX = "/opt/rccl-tests"
#: The benchmarks rccl-tests' src/Makefile builds (BIN_FILES_LIST), each as <name>_perf.
COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "reduce_scatter", "reduce",
               "alltoall", "scatter", "gather", "sendrecv", "alltoallv")
#: The build-time check that every rccl-tests benchmark is built, for exactly the recipe's
#: GPU targets (staged in the build context, bind-mounted into the rccl-tests stage).
CHECK = "rccl-tests-check.py"


@dataclass(frozen=True)
class RcclTestsPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    #: The recipe's GPU targets: hipcc builds device code for these only.
    targets: tuple[str, ...]
    #: Where ROCm is: hipcc, hipify-perl and RCCL's headers and library.
    rocm_prefix: str
    prefix: str = PREFIX
    check: str = CHECK

    @property
    def bin_dir(self) -> str:
        return f"{self.prefix}/bin"

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(f"{name}_perf" for name in COLLECTIVES)

    @property
    def offload_flags(self) -> str:
        """hipcc's device targets: one --offload-arch per recipe target, never its default
        (the build machine's GPU, or a long list where it has none)."""
        return "".join(f" --offload-arch={target}" for target in self.targets)

    @property
    def rocm_path(self) -> str | None:
        """ROCM_PATH for the build, None where it must stay unset: Debian installs ROCm
        under /usr, and hipcc with ROCM_PATH=/usr looks for the device libraries in the
        wrong place; its own defaults find them. AMD's images have /opt/rocm, rccl-tests'
        default (src/Makefile), which any other prefix replaces."""
        return None if self.rocm_prefix == "/usr" else self.rocm_prefix



def planned(parts: Mapping[str, ComponentPlan]) -> RcclTestsPlan | None:
    """Rccl-tests' plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    recipe, tests, lock = context.recipe, context.section, context.lock
    locked = lock.git(LOCK_KEY) if lock else None
    repository, revision = pinned_source(tests.source, locked)
    values = RcclTestsPlan(repository=repository, revision=revision, ref=tests.source.ref,
                           targets=recipe.gpu_targets, rocm_prefix=recipe.rocm_prefix)
    binaries = [f"{values.bin_dir}/{name}" for name in values.binaries]
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("rccl-tests", "stage.j2", "toolchain + rccl-tests' *_perf benchmarks",
                    "rccl-tests repository/commit, GPU targets"),
        steps=("final.j2",), scripts=((CHECK, FOLDER / "check.py"),),
        # zstd: the check reads device code hipcc compressed (--offload-compress) with it.
        build_packages=(*SOURCE_BUILD_PACKAGES, "zstd"),
        linked_files=tuple(binaries),
        # On PATH, after the base image's directories, so that they shadow nothing.
        path=(values.bin_dir,),
        manifest={"enabled": True, **({
            "repository": locked.repository, "ref": locked.ref, "commit": locked.commit,
            "gpu_targets": list(values.targets), "bin": values.bin_dir, "binaries": binaries,
        } if locked else {})},
        sources=(PinnedSource(NAME, "rccl-tests", locked),) if locked else (),
        sizes=((PREFIX, "rccl-tests"),))


COMPONENT = Component(
    name=NAME, title="rccl-tests", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
)
