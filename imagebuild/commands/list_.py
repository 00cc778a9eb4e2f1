"""`imagebuild list`: recipes with ROCm version, Python, torch version and lock status."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from imagebuild.errors import RecipeError, RecipeNotFound
from imagebuild.lock.status import lock_status
from imagebuild.recipe.load import load_all


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "list", help="list recipes and their lock status",
        description="The project's recipes (recipes/*.yaml): ROCm release, Python, torch, "
                    "GPU targets and whether the lock is current. A broken recipe is named "
                    "after the table, and the exit code is 2.")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per recipe instead of the table")
    parser.set_defaults(func=run)


def format_table(rows: Sequence[tuple[str, ...]]) -> str:
    """Plain aligned columns: full values even in a pipe or a narrow CI log."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()
                     for row in rows)


def run(args: argparse.Namespace) -> int:
    recipes, errors = load_all(args.project_dir)
    if not recipes and not errors:
        raise RecipeNotFound(f"no recipes in {args.project_dir / 'recipes'}",
                             hint="run imagebuild in a project (a directory with recipes/"
                                  "*.yaml) or name one with -C DIR")
    if args.json:
        print(json.dumps([{"recipe": r.name, "rocm": r.rocm, "python": r.python,
                           "torch": r.wheels.version_of("torch"),
                           "gpu_targets": list(r.gpu_targets), "lock": lock_status(r).state}
                          for r in recipes], indent=2))
    else:
        rows = [("RECIPE", "ROCM", "PYTHON", "TORCH", "GPU TARGETS", "LOCK")]
        for recipe in recipes:
            rows.append((recipe.name, recipe.rocm or "cpu-only", recipe.python,
                         recipe.wheels.version_of("torch") or "-",
                         ",".join(recipe.gpu_targets) or "-", lock_status(recipe).state))
        print(format_table(rows))
    if errors:  # the good recipes are listed; every problem of the broken ones follows
        raise RecipeError([p for error in errors for p in error.problems])
    return 0
