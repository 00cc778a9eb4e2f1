"""`imagebuild render [RECIPE...] [--check]`: write or check the committed files rendered from
each recipe: dockerfiles/<recipe>/Dockerfile and the EDF envs/<recipe>.toml."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from imagebuild.errors import RecipeNotFound, RenderError, display_path
from imagebuild.generated import check, write_all
from imagebuild.lock.check import current_lock
from imagebuild.recipe.load import load_recipe, recipe_names
from imagebuild.recipe.site import default_site, load_site
from imagebuild.render.context import build_context
from imagebuild.render.dockerfile import generated_dockerfile
from imagebuild.render.edf import DEFAULT_SITE, generated_edf
from imagebuild.render.plan import plan_for


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "render",
        help="render recipes into dockerfiles/<recipe>/Dockerfile and envs/<recipe>.toml",
        description="Render each recipe (all when none is named) and its lock into "
                    "dockerfiles/<recipe>/Dockerfile. An unlocked recipe renders for review, "
                    "marked UNLOCKED in its header.",
    )
    parser.add_argument("recipes", nargs="*", metavar="RECIPE",
                        help="recipe name (a file in recipes/) or path; default: all recipes")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="write nothing; exit 2 naming every committed Dockerfile that is "
                           "missing or stale (CI runs this)")
    mode.add_argument("--stdout", action="store_true",
                      help="print the rendered Dockerfile of one recipe instead of writing it")
    parser.add_argument("--site", default=default_site(DEFAULT_SITE),
                        help="site profile of the EDF files in envs/ (default $IMAGEBUILD_SITE, "
                             f"as for build and squash, else {DEFAULT_SITE})")
    mode.add_argument("--context", metavar="DIR", type=Path,
                      help="stage the build context of one locked recipe in DIR (for a manual "
                           "`docker build DIR`)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    project = args.project_dir
    names = list(args.recipes) or recipe_names(project)
    if not names:
        raise RecipeNotFound(f"no recipes in {display_path(project / 'recipes')}")
    recipes = [load_recipe(name, project) for name in names]
    load_site(args.site, project)  # an unknown --site is an error in every mode

    if args.stdout or args.context:
        if len(recipes) != 1:
            raise RenderError("--stdout and --context take exactly one recipe")
        recipe = recipes[0]
        if args.stdout:
            sys.stdout.write(generated_dockerfile(plan_for(recipe, current_lock(recipe), project),
                                                 project).text)
            return 0
        staged = build_context(plan_for(recipe, current_lock(recipe), project), args.context)
        print(f"staged {len(staged.files)} files in {staged.directory}; build with: "
              f"DOCKER_BUILDKIT=1 docker build --network host {staged.directory}")
        return 0

    plans = [plan_for(recipe, current_lock(recipe), project) for recipe in recipes]
    files = [generated_dockerfile(plan, project) for plan in plans]
    # Each EDF follows what its image carries (the plan's network plugin and verbs).
    files += [generated_edf(plan.recipe, project, args.site, plan.image_network)
              for plan in plans]
    if args.check:
        orphans = [] if args.recipes else _orphans(project, {r.name for r in recipes})
        check(files, project, also=orphans)
        print(f"{len(recipes)} Dockerfile(s) and EDF file(s) up to date")
        return 0

    written = {item.path for item in write_all(files)}
    for item in files:
        state = "wrote" if item.path in written else "unchanged"
        print(f"{state} {display_path(item.path, project)}")
    return 0


def _orphans(project: Path, known: set[str]) -> list[str]:
    """Committed files whose recipe is gone (they would otherwise rot unnoticed)."""
    problems = []
    rendered = [(p, p.parent.name) for p in sorted((project / "dockerfiles").glob("*/Dockerfile"))]
    rendered += [(p, p.stem) for p in sorted((project / "envs").glob("*.toml"))]
    for path, name in rendered:
        if name not in known:
            problems.append(f"{display_path(path, project)}: no recipe "
                            f"recipes/{name}.yaml renders it; delete it")
    return problems

