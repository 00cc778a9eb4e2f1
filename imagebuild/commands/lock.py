"""`imagebuild lock [RECIPE...]` writes locks; `--check` verifies them offline (CI)."""

from __future__ import annotations

import argparse
import json
import sys

from imagebuild.errors import LockError, RecipeError
from imagebuild.lock.options import LockOptions, parse_mirrors
from imagebuild.lock.resolve import lock_recipe
from imagebuild.lock.status import check_locks, lock_status
from imagebuild.recipe.load import load_all, load_recipe


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "lock", help="resolve recipes against the wheel index and write their locks")
    parser.add_argument("recipes", nargs="*", metavar="RECIPE",
                        help="recipe names or paths (default for --check: all)")
    parser.add_argument("--check", action="store_true",
                        help="offline: fail when a lock is stale or broken (CI)")
    parser.add_argument("--strict", action="store_true",
                        help="with --check: an unlocked recipe is fatal too")
    parser.add_argument("--json", action="store_true",
                        help="with --check: every recipe's lock state as JSON on stdout")
    parser.add_argument("--index-url", help="wheel index URL or directory for the ROCm wheels "
                        "(default: the recipe's; env IMAGEBUILD_WHEEL_INDEX)")
    parser.add_argument("--pypi-url", help="PyPI mirror for dependencies "
                        "(env IMAGEBUILD_PYPI_INDEX)")
    parser.add_argument("--git-mirror", action="append", default=[], metavar="FROM=TO",
                        help="rewrite source repository URL prefixes (env "
                             "IMAGEBUILD_GIT_MIRRORS, ';'-separated)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    project = args.project_dir
    if args.check:
        recipes = [load_recipe(name, project) for name in args.recipes]
        if not args.recipes:
            recipes, errors = load_all(project)
            if errors:
                raise RecipeError([p for error in errors for p in error.problems])
        if args.json:  # the states first, then (exit 2) whatever is fatal
            print(json.dumps([{"recipe": s.recipe, "state": s.state, "detail": s.detail}
                              for s in (lock_status(r) for r in recipes)], indent=2))
            check_locks(recipes, strict=args.strict)
            return 0
        statuses = check_locks(recipes, strict=args.strict)
        for status in statuses:
            note = "" if status.state == "locked" else \
                f" (run `imagebuild lock {status.recipe}` where the index is reachable)"
            print(f"{status.recipe}: {status.state}{note}")
        return 0
    if not args.recipes:
        raise LockError("name the recipes to lock (locking reaches the network)",
                        hint="`imagebuild lock --check` checks every lock offline")
    options = LockOptions.from_env(
        index_url=args.index_url, pypi_url=args.pypi_url,
        git_mirrors=dict(parse_mirrors(";".join(args.git_mirror))))
    for name in args.recipes:
        recipe = load_recipe(name, project)
        lock = lock_recipe(recipe, options,
                           progress=lambda msg: print(f"  {msg}", file=sys.stderr))
        print(f"{recipe.name}: locked {len(lock.wheels)} wheels, base {lock.base_image_pinned}"
              f" -> {lock.path}")
    return 0
