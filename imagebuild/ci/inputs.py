"""Which project files each recipe's image depends on: the recipe files it was merged from
(parents included), its lock, its rendered Dockerfile directory and its EDF file.

Both pipelines decide from these paths: GitLab lists them in each image job's
``rules: changes``, and ``imagebuild ci affected`` matches changed files against them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.ci.config import PATH_PATTERN
from imagebuild.errors import Problem, RecipeError
from imagebuild.lock.lockfile import lock_path
from imagebuild.recipe import grammar
from imagebuild.recipe.model import Recipe

#: Recipe names become CI job names and shell values.
RECIPE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


@dataclass(frozen=True)
class RecipeInputs:
    """One image job: the recipe and the project paths whose change rebuilds it."""

    name: str
    rocm: str | None
    #: The image's Python: with the ROCm version, the matrix's axes (a TheRock line has
    #: a recipe per Python its index builds for).
    python: str
    #: Project-relative paths; ``dir/**`` stands for everything below dir.
    paths: tuple[str, ...]


def recipe_inputs(recipes: Iterable[Recipe], project: Path) -> tuple[RecipeInputs, ...]:
    """The recipe files it was merged from (parents included), its lock, its rendered
    Dockerfile directory and its EDF file. Names reach YAML and shell, so they are checked."""
    problems: list[Problem] = []
    out: list[RecipeInputs] = []
    for recipe in sorted(recipes, key=lambda r: r.name):
        if not grammar.matches(RECIPE_NAME, recipe.name):
            problems.append(Problem(recipe.path, None, "",
                                    f"recipe name {recipe.name!r} cannot name a CI job: "
                                    "use letters, digits, '.', '_' and '-'"))
            continue
        paths = [_relative(source, project, problems) for source in recipe.sources]
        paths += [_relative(lock_path(recipe), project, problems),
                  f"dockerfiles/{recipe.name}/**", f"envs/{recipe.name}.toml"]
        out.append(RecipeInputs(recipe.name, recipe.rocm, recipe.python,
                                tuple(dict.fromkeys(paths))))
    if problems:
        raise RecipeError(problems)
    return tuple(out)


def _relative(path: Path, project: Path, problems: list[Problem]) -> str:
    try:
        relative = path.resolve().relative_to(project.resolve()).as_posix()
    except ValueError:
        problems.append(Problem(path, None, "", f"is outside the project {project}: CI "
                                                "change rules can only name project files"))
        return path.as_posix()
    if not grammar.matches(PATH_PATTERN, relative):
        problems.append(Problem(path, None, "", "file name cannot appear in CI change rules: "
                                                "use letters, digits, '.', '_' and '-'"))
    return relative


def path_matches(pattern: str, path: str) -> bool:
    """``dir/**`` matches everything below dir; any other pattern is a literal path."""
    if pattern.endswith("/**"):
        return path.startswith(pattern[:-2])
    return path == pattern
