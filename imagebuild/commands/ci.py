"""`imagebuild ci` writes the CI pipelines in ci/; `--check` fails when they are stale;
`imagebuild ci affected` prints the recipes a change affects (the GitHub plan job)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from imagebuild import generated
from imagebuild.ci.affected import affected_recipes, all_recipes, changed_files, selected_recipes
from imagebuild.ci.config import load_ci_config
from imagebuild.ci.generate import generated_files
from imagebuild.ci.inputs import recipe_inputs
from imagebuild.errors import ImagebuildError, RecipeError, display_path
from imagebuild.recipe.load import load_all


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "ci", help="generate the GitHub Actions and GitLab CI pipelines in ci/",
        description="Generate ci/ from recipes/ and ci/config.yaml (defaults: "
                    "imagebuild/data/ci.yaml): one image job per recipe.")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 2 naming each stale generated file (CI)")
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="ci_command", metavar="SUBCOMMAND")
    affected = sub.add_parser(
        "affected", help="recipes affected by the changes since a commit, as a CI matrix",
        description="Map the files changed since --base to the recipes they rebuild (a "
                    "recipe's own files, its parents, lock, Dockerfile and EDF file; the "
                    "paths in rebuild_all_on rebuild all). Prints the GitHub Actions matrix "
                    "as JSON; reasons go to stderr.")
    affected.add_argument("--base", default="", metavar="COMMIT",
                          help="compare with this commit (empty, all zeros or unknown: "
                               "every recipe)")
    affected.add_argument("--head", default="HEAD", metavar="COMMIT",
                          help="the commit whose changes are planned (default HEAD)")
    affected.add_argument("--recipes", default="", metavar="NAMES",
                          help="space- or comma-separated recipe names, or 'all': build "
                               "these instead of working out the changes")
    affected.add_argument("--github-output", action="store_true",
                          help="also append matrix=... and any=true|false to $GITHUB_OUTPUT")
    affected.set_defaults(func=run_affected)


def run(args: argparse.Namespace) -> int:
    project = args.project_dir
    files = generated_files(project)
    if args.check:
        generated.check(files, root=project)
        print(f"ci: {len(files)} generated files current")
        return 0
    written = {item.path for item in generated.write_all(files)}
    for item in files:
        state = "written" if item.path in written else "unchanged"
        print(f"{display_path(item.path, project)}: {state}")
    return 0


def run_affected(args: argparse.Namespace) -> int:
    project = args.project_dir
    recipes, errors = load_all(project)
    if errors:
        raise RecipeError([p for error in errors for p in error.problems])
    config = load_ci_config(project)
    inputs = recipe_inputs(recipes, project)
    requested = args.recipes.replace(",", " ").split()
    if requested == ["all"]:
        result = all_recipes(inputs, "all requested")
    elif requested:
        result = selected_recipes(inputs, requested)
    else:
        changed = changed_files(project, args.base, args.head)
        if changed is None:
            why = (f"cannot diff against {args.base!r} (new branch or commit not fetched)"
                   if args.base and args.base.strip("0") else "no base commit")
            result = all_recipes(inputs, f"{why}: building all")
        else:
            result = affected_recipes(inputs, changed, config)
    for name, reason in result.reasons:
        print(f"{name}: {reason}", file=sys.stderr)
    if not result.recipes:
        print("no recipe affected", file=sys.stderr)
    matrix = json.dumps(result.matrix(), separators=(",", ":"))
    print(matrix)
    if args.github_output:
        target = os.environ.get("GITHUB_OUTPUT")
        if not target:
            raise ImagebuildError("--github-output: GITHUB_OUTPUT is not set "
                                  "(only GitHub Actions sets it)")
        with open(target, "a", encoding="utf-8") as stream:
            stream.write(f"matrix={matrix}\nany={'true' if result.recipes else 'false'}\n")
    return 0
