"""The recipes a change affects: what GitHub's plan job (``imagebuild ci affected``) hands
to the image jobs as their matrix.

GitHub ``paths`` filters cannot differ per matrix entry, so the workflow runs every image
job from this one decision; a file in ``rebuild_all_on`` rebuilds every recipe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.ci.config import CIConfig
from imagebuild.ci.inputs import RecipeInputs, path_matches
from imagebuild.errors import CommandFailed, EngineError, ImagebuildError
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

#: Seconds `git diff` may take before the caller falls back to building everything.
GIT_DIFF_TIMEOUT_S = 120


@dataclass(frozen=True)
class Affected:
    """The recipes a change affects, each with the changed file that made it so."""

    recipes: tuple[RecipeInputs, ...]
    #: recipe name -> why it is in (a changed path, or the reason all are in).
    reasons: tuple[tuple[str, str], ...]

    def matrix(self) -> dict[str, list[dict[str, str]]]:
        """The GitHub Actions matrix: ``strategy.matrix: ${{ fromJSON(...) }}``."""
        return {"include": [{"recipe": r.name, "rocm": r.rocm or "cpu", "python": r.python}
                            for r in self.recipes]}


def affected_recipes(inputs: Sequence[RecipeInputs], changed: Iterable[str],
                     config: CIConfig) -> Affected:
    """Map changed project paths to the recipes they rebuild."""
    changed = sorted(set(changed))
    for path in changed:
        for pattern in config.rebuild_all_on:
            if path_matches(pattern, path):
                return all_recipes(inputs, f"{path} changed (rebuild_all_on: {pattern})")
    chosen: list[RecipeInputs] = []
    reasons: list[tuple[str, str]] = []
    for item in inputs:
        hit = next((p for p in changed if any(path_matches(q, p) for q in item.paths)), None)
        if hit:
            chosen.append(item)
            reasons.append((item.name, f"{hit} changed"))
    return Affected(tuple(chosen), tuple(reasons))


def all_recipes(inputs: Sequence[RecipeInputs], reason: str) -> Affected:
    return Affected(tuple(inputs), tuple((item.name, reason) for item in inputs))


def selected_recipes(inputs: Sequence[RecipeInputs], names: Iterable[str]) -> Affected:
    """Recipes named by hand (a manually started run); an unknown name is an error."""
    known = {item.name: item for item in inputs}
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ImagebuildError(f"unknown recipe(s) {', '.join(unknown)}; "
                              f"known: {', '.join(known) or 'none'}")
    return Affected(tuple(known[n] for n in names), tuple((n, "requested") for n in names))


#: What git reports as the "before" commit of a newly pushed branch.
_NULL_COMMIT = re.compile(r"^0+$")
_REVISION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._/~^@{}-]*$")


def changed_files(project: Path, base: str, head: str = "HEAD",
                  runner: CommandRunner = DEFAULT_RUNNER) -> list[str] | None:
    """Project-relative paths changed between ``base`` and ``head`` (since their merge base);
    None when git cannot tell (no base, a new branch, a base missing from a shallow clone):
    the caller then builds everything, which is the safe direction."""
    if not base or _NULL_COMMIT.match(base):
        return None
    for name, rev in (("--base", base), ("--head", head)):
        if not _REVISION.match(rev):  # never let a value become a git option
            raise ImagebuildError(f"{name}: {rev!r} is not a commit or ref name")
    command = ["git", "-C", str(project), "diff", "--name-only", "--no-renames", "--relative",
               "-z", f"{base}...{head}", "--"]
    try:
        result = runner.capture(command, step="git diff", timeout=GIT_DIFF_TIMEOUT_S,
                                text=False, check=False)
    except (CommandFailed, EngineError):  # timed out, or no git on the runner
        return None
    if result.returncode != 0:
        return None
    return [p for p in result.stdout.split("\0") if p]
