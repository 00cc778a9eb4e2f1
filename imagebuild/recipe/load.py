"""YAML recipe -> Recipe: find it, merge its ``extends`` chain (``recipe.extends``), apply
defaults, check the merged recipe and each component's rules, build the Recipe.

Every problem is collected before anything is raised, so a user fixes a broken recipe in one
round: each comes out as ``file:line: key.path: what was expected`` (with a did-you-mean for
unknown keys). Line numbers come from the YAML node tree, and survive ``extends`` merging
because every leaf remembers the file and line it came from.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagebuild import components
from imagebuild.errors import Problem, RecipeError, RecipeNotFound
from imagebuild.project import project_dir
from imagebuild.recipe import spec
from imagebuild.recipe.extends import RECIPE_SUFFIX, merged_chain, with_defaults
from imagebuild.recipe.located import KeyPath, Origin, dotted
from imagebuild.recipe.model import (
    RADEON_INDEX,
    ROCM_WHEELS_INDEX,
    Recipe,
    Section,
    Wheels,
)
from imagebuild.recipe.rocm_layout import is_therock_line, system_prefix
from imagebuild.recipe.therock import untested_checks, wheels_layout, wheels_targets


def recipes_dir(project: Path | None = None) -> Path:
    return (project or project_dir()) / "recipes"


def recipe_names(project: Path | None = None) -> list[str]:
    """Buildable recipes; files starting with '_' are shared parents, not images."""
    directory = recipes_dir(project)
    if not directory.is_dir():
        return []
    return sorted((p.stem for p in directory.glob(f"*{RECIPE_SUFFIX}")
                   if not p.name.startswith("_")), key=natural_key)


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Numbers compared as numbers: rocm-6.4.4 < rocm-7.2.4 < rocm-7.14.1 < rocm-10.1.0."""
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", name) if part)


def find_recipe(name_or_path: str, project: Path | None = None) -> Path:
    """A recipe name (a file in recipes/) or a path to a recipe file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") and candidate.is_file():
        return candidate.resolve()
    path = recipes_dir(project) / f"{name_or_path}{RECIPE_SUFFIX}"
    if path.is_file():
        return path
    known = recipe_names(project)
    hint = difflib.get_close_matches(name_or_path, known, n=1)
    message = f"no recipe named {name_or_path!r} in {recipes_dir(project)}"
    if hint:
        message += f"; did you mean {hint[0]!r}?"
    elif known:
        message += f" (known: {', '.join(known)})"
    raise RecipeNotFound(message)


def load_recipe(name_or_path: str | Path, project: Path | None = None) -> Recipe:
    path = find_recipe(str(name_or_path), project)
    problems: list[Problem] = []
    merged, origins, sources = merged_chain(path, problems)
    if problems:
        raise RecipeError(problems)
    recipe = _build(path, merged, origins, sources, problems)
    if problems:
        raise RecipeError(problems)
    assert recipe is not None
    return recipe


# --- merged validation and construction ---------------------------------------------------

def _build(path: Path, merged: dict[str, Any], origins: dict[KeyPath, Origin],
           sources: tuple[Path, ...], problems: list[Problem]) -> Recipe | None:
    def problem(at: KeyPath, message: str) -> None:
        origin = origins.get(at) or origins.get(at[:-1]) or origins.get(at[:1]) or Origin(path, 0)
        problems.append(Problem(origin.file, origin.line or None, dotted(at), message))

    for key in spec.CORE.required:
        if key not in merged:
            problem((key,), "missing (required in the recipe or a parent it extends)")
    if problems:
        return None
    data = with_defaults(merged)
    # Not a default: the directory depends on the release line (rocm_layout).
    data.setdefault("rocm_prefix", system_prefix(data["rocm"]))
    for name, value in data["wheels"]["packages"].items():
        if value is None:
            problem(("wheels", "packages", name), "null here removes nothing inherited")
    if "torch" not in data["wheels"]["packages"]:
        problem(("wheels", "packages"), "must pin torch (the image exists to run it)")

    rocm = data["rocm"]
    rocm_wheels = data["rocm_from"] == "wheels"
    family = layout = None
    extras: tuple[str, ...] = ()
    index_url = data["wheels"].get("index_url")
    if rocm_wheels:
        layout, index_url = wheels_layout(data, index_url)
        family, extras = wheels_targets(data, layout, problem)
    elif rocm is not None and is_therock_line(rocm):
        untested_checks(data, "a TheRock base image", problem)
    elif data["accept_untested_targets"]:
        problem(("accept_untested_targets",), "only applies to the TheRock lines (7.14.x, "
                "10.x); a packaged ROCm base image has its own support list")
    if index_url is None:
        if rocm is None:
            problem(("wheels", "index_url"),
                    "required for a CPU-only recipe (there is no ROCm release to derive it from)")
        index_url = ROCM_WHEELS_INDEX if rocm_wheels else RADEON_INDEX.format(rocm=rocm)
    if "{family}" in index_url:
        if not rocm_wheels:
            problem(("wheels", "index_url"), "{family} is only known when rocm_from is wheels")
        index_url = index_url.replace("{family}", family or "")

    sections = _component_rules(data, problem)
    if problems:
        return None

    pypi = data["wheels"].get("pypi", [])
    return Recipe(
        name=path.stem,
        path=path,
        format_version=data["version"],
        description=data["description"],
        rocm=rocm,
        base_image=data["base_image"],
        os_packages=tuple(data["os_packages"]),
        rocm_prefix=data["rocm_prefix"],
        build_packages=tuple(data["build_packages"]),
        sites=tuple(data["sites"]),
        python=data["python"],
        wheels=Wheels(
            index_url=index_url,
            pinned=tuple(sorted(data["wheels"]["packages"].items())),
            # The components' own requirements (Megatron's) are locked like every other wheel.
            extra=tuple(pypi) + tuple(
                r for c in components.registered() if c.name in sections
                and sections[c.name].enabled
                for r in c.requirements(sections[c.name]) if r not in pypi),
        ),
        gpu_targets=tuple(data["gpu_targets"]),
        env=tuple(data["env"].items()),
        labels=tuple(sorted(data["labels"].items())),
        dockerfile_syntax=data["dockerfile"]["syntax"],
        sources=sources,
        rocm_from=data["rocm_from"],
        gpu_family=family,
        wheel_layout=layout,
        device_extras=extras,
        accept_untested_targets=tuple(data["accept_untested_targets"]),
        components=sections,
        as_written={k: v for k, v in data.items() if k != "extends"},
    )


def _component_rules(data: dict[str, Any], problem: Callable[[KeyPath, str], None]
                     ) -> dict[str, Section]:
    """Each component's rules over its section when on, then its typed settings: every
    section that is on, and the first format's sections when off too."""
    sections: dict[str, Section] = {}
    builds = []
    for component in components.registered():
        section = data[component.name]
        if section.get("enabled"):
            component.rules(section, data, problem)
            if component.needs_build_packages:
                builds.append(component.name)
        if section.get("enabled") or component.always_recorded:
            sections[component.name] = component.read(section, data)
    if builds and not data["build_packages"]:
        problem((builds[0], "enabled"), "needs build_packages: the OS packages the source "
                "builds use (compilers, autotools, the ROCm development packages)")
    return sections


def load_all(project: Path | None = None) -> tuple[list[Recipe], list[RecipeError]]:
    """Every buildable recipe; broken ones are returned as errors, not raised."""
    recipes: list[Recipe] = []
    errors: list[RecipeError] = []
    for name in recipe_names(project):
        try:
            recipes.append(load_recipe(name, project))
        except RecipeError as exc:
            errors.append(exc)
    return recipes, errors
