"""`imagebuild show RECIPE`: the fully merged recipe and what its lock pins."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

import yaml

from imagebuild.lock.lockfile import lock_path, read_lock
from imagebuild.lock.status import lock_status
from imagebuild.recipe.load import load_recipe


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("show", help="show the merged recipe and its lock")
    parser.add_argument("recipe", help="recipe name (recipes/NAME.yaml) or path")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe, args.project_dir)
    status = lock_status(recipe)
    merged = recipe.as_written
    report: dict = {
        "recipe": recipe.name,
        "file": str(recipe.path),
        "extends": [str(p.name) for p in recipe.sources[1:]],
        "input_hash": recipe.input_hash(),
        "merged": merged,
        "lock": {"state": status.state, "file": str(lock_path(recipe)), "detail": status.detail},
    }
    if status.state in ("locked", "stale"):
        lock = read_lock(lock_path(recipe))
        report["lock"]["pins"] = {
            "base_image": lock.base_image_pinned,
            "wheels": {w.name: {"version": w.version, "url": w.url, "sha256": w.sha256}
                       for w in lock.wheels},
            # The components' git sources and archives, by their key in the lock.
            "sources": {key: asdict(source) for key, source in lock.sources.items()},
        }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(yaml.safe_dump(report, sort_keys=False, width=100), end="")
    return 0
