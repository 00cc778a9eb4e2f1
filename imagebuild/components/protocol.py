"""What an image component is to the stages: one frozen ``Component`` of data and functions,
made once in the component's folder (``imagebuild/components/<name>/component.py``) and read
by every stage in the registry's order (``imagebuild.components``).

A component owns its recipe section (format, defaults, the rules that tie it to the rest of
the recipe, its typed settings) and everything the later stages do for it. No stage names a
component: each loops over the registry and asks every component that is on for its part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.lock.model import Pin
from imagebuild.recipe.model import GitSource, Recipe, Section
from imagebuild.recipe.spec import Obj

KeyPath = tuple[str, ...]
#: Records a problem at a key path of the merged recipe (its file and line are found from
#: the path), like every other recipe problem.
ProblemAt = Callable[[KeyPath, str], None]
#: A section as the merged recipe has it, its defaults filled in.
SectionData = Mapping[str, Any]
#: The whole merged recipe, defaults filled in (core keys and every section).
RecipeData = Mapping[str, Any]


def _no_rules(section: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    return None


def _nothing(section: Any) -> tuple[str, ...]:
    return ()


def _no_pins(section: Any, recipe: Recipe) -> tuple[Pin, ...]:
    return ()


@dataclass(frozen=True, eq=False)
class Component:
    """One optional part of an image, with everything each stage does for it."""

    #: The recipe section's key, and the component's name in the registry, the lock inputs
    #: and the manifest: ``hipblaslt``.
    name: str
    #: Its name for people (size table, SBOM, messages): ``hipBLASLt``.
    title: str
    #: The component's folder: its templates, build-time check and other files.
    folder: Path
    #: The section's format (a recipe's ``<name>:`` mapping, with ``enabled``), and the
    #: values a recipe may leave out.
    spec: Obj
    defaults: Mapping[str, Any]
    #: The typed settings of a section that passed the format and the rules.
    read: Callable[[SectionData, RecipeData], Section]
    #: The rules that tie an enabled section to the rest of the recipe; each problem is
    #: recorded with ``problem(key path, message)``.
    rules: Callable[[SectionData, RecipeData, ProblemAt], None] = _no_rules
    #: PyPI requirements of an enabled section, locked with the image's wheels.
    requirements: Callable[[Any], tuple[str, ...]] = _nothing
    #: What the lock pins for an enabled section (git sources, archives, wheels and
    #: source archives of the wheel index), each pin's key its own.
    pins: Callable[[Any, Recipe], tuple[Pin, ...]] = _no_pins
    #: A section of the first recipe format (hipBLASLt, the network plugin): recorded when
    #: off too, in the recipe's hash, its lock inputs and the manifest, as the recipes
    #: written before the later sections were hashed. Later sections count only when on.
    always_recorded: bool = False
    #: Its stage compiles with the recipe's build_packages, which a recipe that enables it
    #: must then list.
    needs_build_packages: bool = False
    #: (place, component): at that place (``schema``: the recipe format's key order;
    #: ``final``: the final stage's steps) this component goes right before that one, where
    #: the registry's order is not the order the files were first written in.
    precedes: tuple[tuple[str, str], ...] = ()


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
