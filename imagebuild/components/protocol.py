"""What an image component is to the stages: one frozen ``Component`` of data and functions,
made once in the component's folder (``imagebuild/components/<name>/component.py``) and read
by every stage in the registry's order (``imagebuild.components``).

A component owns its recipe section (format, defaults, the rules that tie it to the rest of
the recipe, its typed settings), what the lock pins for it, and its ``ComponentPlan``: its
build stage, its steps in the final stage, the files its steps use, its share of the
image's packages, library path and environment, its manifest part, its SBOM entries and
its size-table parts. No stage names a component: each loops over the registry and asks
every component that is on for its part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.lock.model import Lock, Pin, PinnedSource
from imagebuild.recipe.fields import Obj
from imagebuild.recipe.image_network import NetPlugin
from imagebuild.recipe.model import Recipe, Section

if TYPE_CHECKING:
    from imagebuild.recipe.site import SiteProfile

KeyPath = tuple[str, ...]
#: Records a problem at a key path of the merged recipe (its file and line are found from
#: the path), like every other recipe problem.
ProblemAt = Callable[[KeyPath, str], None]
#: A section as the merged recipe has it, its defaults filled in.
SectionData = Mapping[str, Any]
#: The whole merged recipe, defaults filled in (core keys and every section).
RecipeData = Mapping[str, Any]


@dataclass(frozen=True)
class ProjectFile:
    """A file of the project a section names (a configuration the image carries): read once
    by the caller of the plan, so that making the plan reads nothing."""

    #: The recipe key naming it, for messages: ``<section>.config``.
    key: str
    #: Its path relative to the project.
    path: str
    #: What it is and how to make one, for the message when it is missing.
    hint: str


@dataclass(frozen=True)
class PlanInputs:
    """What plans need from outside the recipe and its lock, resolved once by their caller
    (``imagebuild.render.inputs.plan_inputs``)."""

    #: The project the command works on.
    project: Path
    #: The site profiles the recipe names (``sites:``), loaded.
    sites: tuple[SiteProfile, ...] = ()
    #: The project files the sections name, by their path in the project: their text.
    files: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PlanContext:
    """What a component's plan function is given."""

    recipe: Recipe
    #: The component's own section (on).
    section: Any
    #: The checked lock; None: unlocked, planned for a review render only.
    lock: Lock | None
    inputs: PlanInputs
    #: The plans of the components it ``needs`` that are on (made before it).
    needed: Mapping[str, ComponentPlan]


@dataclass(frozen=True)
class Stage:
    """A component's build stage in the Dockerfile."""

    #: The stage's name (``FROM toolchain AS <name>``; the final stage copies from it).
    name: str
    #: Its template, in the component's folder.
    template: str
    #: For ``build --plan`` and the Dockerfile's header: what it holds, what rebuilds it.
    holds: str
    rebuilds: str
    #: It mounts the python stage's venv, so it comes after that stage.
    on_venv: bool = False


@dataclass(frozen=True)
class EnvVar:
    """A variable the final image sets for a component."""

    name: str
    value: str
    #: Set, a recipe may not set the variable too, for this reason (``while <why>``).
    owned_while: str | None = None


@dataclass(frozen=True)
class ProvidedLibfabric:
    """A libfabric a component builds for the image, which the network plugin is then built
    against (and RCCL loads it where the site's runtime leaves the image's libfabric alone)."""

    #: Its install prefix, in ``stage`` and in the final image.
    prefix: str
    version: str
    #: Providers beyond libfabric's built-in ones (tcp, udp, shm...): ``("cxi",)``.
    providers: tuple[str, ...]
    #: The build stage that installs it: a stage built on it finds the prefix in place.
    stage: str


@dataclass(frozen=True)
class ComponentPlan:
    """Everything the later stages do for one component that is on, as data."""

    name: str
    #: What its templates read under the component's name: its typed plan.
    values: Any
    stage: Stage | None = None
    #: Templates of its folder whose macros are its steps in the python and
    #: final stages, one macro per place (imagebuild.render.stages.SLOTS).
    steps: tuple[str, ...] = ()
    #: Files its steps bind-mount or copy from the build context: name -> text.
    files: tuple[tuple[str, str], ...] = ()
    #: Build-time scripts (checks) its steps run: name in the context -> source. The context
    #: stages each with the shared helpers the scripts import.
    scripts: tuple[tuple[str, Path], ...] = ()
    #: OS packages of the toolchain stage its stage needs beyond the recipe's.
    build_packages: tuple[str, ...] = ()
    #: OS packages the final image needs for what it installs.
    runtime_packages: tuple[str, ...] = ()
    #: Directories on the image's LD_LIBRARY_PATH, and in the loader cache (name of the
    #: /etc/ld.so.conf.d entry, directory).
    library_path: tuple[str, ...] = ()
    loader_dirs: tuple[tuple[str, str], ...] = ()
    #: Files the final stage checks with ldd.
    linked_files: tuple[str, ...] = ()
    #: Directories appended to the image's PATH.
    path: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    #: Its part of /opt/imagebuild/manifest.json (its final-stage checks may add to it).
    manifest: Mapping[str, Any] = field(default_factory=dict)
    #: The pinned sources it is built from, for the SBOM.
    sources: tuple[PinnedSource, ...] = ()
    #: (path prefix in the image, size-table part), most specific first.
    sizes: tuple[tuple[str, str], ...] = ()
    #: Path prefixes whose build-only files (headers, build trees) it keeps on purpose.
    keeps: tuple[str, ...] = ()
    #: The RCCL network plugin it installs, if any: what a job's NCCL_NET may name
    #: (imagebuild.recipe.image_network).
    net_plugin: NetPlugin | None = None
    #: The libfabric it builds for the others, if any.
    libfabric: ProvidedLibfabric | None = None


def _no_rules(section: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    return None


def _nothing(section: Any) -> tuple[Any, ...]:
    return ()


def _no_pins(section: Any, recipe: Recipe) -> tuple[Pin, ...]:
    return ()


@dataclass(frozen=True, eq=False)
class Component:
    """One optional part of an image, with everything each stage does for it."""

    #: The recipe section's key, and the component's name in the registry, the lock inputs,
    #: the plan and the manifest: ``hipblaslt``.
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
    #: Its plan, when on.
    plan: Callable[[PlanContext], ComponentPlan]
    #: The rules that tie an enabled section to the rest of the recipe; each problem is
    #: recorded with ``problem(key path, message)``.
    rules: Callable[[SectionData, RecipeData, ProblemAt], None] = _no_rules
    #: PyPI requirements of an enabled section, locked with the image's wheels.
    requirements: Callable[[Any], tuple[str, ...]] = _nothing
    #: What the lock pins for an enabled section (git sources, archives, wheels and
    #: source archives of the wheel index), each pin's key its own.
    pins: Callable[[Any, Recipe], tuple[Pin, ...]] = _no_pins
    #: The project files an enabled section names.
    project_files: Callable[[Any], tuple[ProjectFile, ...]] = _nothing
    #: What the committed EDF of a recipe that enables it tells a job about it: comment
    #: lines (without the ``# ``), such as the variables that switch on what it offers.
    edf_notes: Callable[[Any], tuple[str, ...]] = _nothing
    #: Components whose outputs it builds on, by name: each earlier in the registry; their
    #: plans, when on, are handed to its plan (``PlanContext.needed``).
    needs: tuple[str, ...] = ()
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
