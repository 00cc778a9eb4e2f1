"""`imagebuild schema`: write (or --check) the recipe JSON Schema shipped for editors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from imagebuild.errors import StaleFile
from imagebuild.recipe.load import project_dir
from imagebuild.recipe.spec import json_schema

SCHEMA_PATH = Path("schema") / "recipe.schema.json"


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("schema", help="write the recipe JSON Schema")
    parser.add_argument("--check", action="store_true",
                        help="fail when schema/recipe.schema.json is stale")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    path = project_dir() / SCHEMA_PATH
    text = schema_text()
    if args.check:
        if not path.exists() or path.read_text() != text:
            raise StaleFile(f"{SCHEMA_PATH}: stale or missing; run `imagebuild schema`")
        print(f"{SCHEMA_PATH}: up to date")
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {SCHEMA_PATH}")
    return 0
