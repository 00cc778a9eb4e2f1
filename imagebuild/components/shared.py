"""What several components share, so that none imports another: the rules their sections
have in common, what a source build needs, the source a stage fetches."""

from __future__ import annotations

from imagebuild.components.protocol import (
    KeyPath,
    PlanContext,
    ProblemAt,
    ProvidedLibfabric,
    RecipeData,
    SectionData,
)
from imagebuild.lock.model import LockedGit
from imagebuild.recipe.model import GitSource, Recipe

#: What a stage that fetches and compiles sources needs beyond the recipe's build_packages:
#: git fetches the sources (rccl-tests also names the revision in its binaries), make and
#: g++ build them (Megatron's dataset helpers are a pybind11 extension built by
#: megatron/core/datasets/Makefile; hipcc's clang compiles rccl-tests' host code against the
#: C++ standard library g++ brings).
SOURCE_BUILD_PACKAGES = ("g++", "make", "git", "ca-certificates")


def python_dev_package(recipe: Recipe) -> str:
    """The OS package with the headers and python<X.Y>-config of the venv's interpreter
    (Debian and Ubuntu naming)."""
    return f"python{recipe.python}-dev"


def pinned_source(source: GitSource, locked: LockedGit | None) -> tuple[str, str]:
    """(repository, revision) a stage fetches: the lock's URL (a --git-mirror at lock time
    rewrote it for this site) and commit, or the recipe's repository and ref when unlocked
    (review renders only)."""
    if locked is None:
        return source.repository, source.ref
    return locked.repository, locked.commit


def git_source(section: SectionData) -> GitSource:
    return GitSource(repository=section.get("repository", ""), ref=section.get("ref", ""))


def require_keys(name: str, section: SectionData, keys: tuple[str, ...],
                 problem: ProblemAt, within: KeyPath = ()) -> None:
    """Each of ``keys`` must be set when the section is on."""
    for key in keys:
        if key not in section:
            problem((name, *within, key), f"missing (required when {name}.enabled is true)")


def needs_rocm(name: str, recipe: RecipeData, problem: ProblemAt, why: str = "") -> None:
    """The component compiles against or checks with the image's ROCm."""
    if recipe["rocm"] is None:
        problem((name, "enabled"), "needs a ROCm release (rocm is null: CPU-only image)" + why)


def refused_with_rocm_wheels(name: str, recipe: RecipeData, problem: ProblemAt,
                             why: str) -> None:
    """The component needs ROCm in the base image, which a ROCm-from-wheels recipe has not."""
    if recipe["rocm_from"] == "wheels":
        problem((name, "enabled"), f"must be false with rocm_from: wheels: {why}")


def rccl_loading(context: PlanContext) -> tuple[str, str | None]:
    """(where, stage): the RCCL a plugin's check reads the interface lookups of: the recipe's
    pinned RCCL (``rccl:``, a component this one ``needs``: its install prefix, mounted from
    its stage), else the base image's, under rocm_prefix (no stage)."""
    pinned = context.needed.get("rccl")
    if pinned is None or pinned.stage is None:
        return context.recipe.rocm_prefix, None
    return pinned.values.prefix, pinned.stage.name


def image_libfabric(context: PlanContext) -> ProvidedLibfabric | None:
    """The libfabric a component this one ``needs`` builds for the image (the CXI stack's),
    or None: the component then builds its own."""
    return next((part.libfabric for part in context.needed.values() if part.libfabric), None)
