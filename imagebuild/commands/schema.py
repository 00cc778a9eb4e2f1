"""`imagebuild schema`: write (or --check) the JSON Schemas shipped for editors: recipes
(schema/recipe.schema.json) and site profiles (schema/site.schema.json)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from imagebuild import generated
from imagebuild.recipe import format as recipe_format
from imagebuild.recipe import site_spec

SCHEMA_PATH = Path("schema") / "recipe.schema.json"
SITE_SCHEMA_PATH = Path("schema") / "site.schema.json"
REGENERATE = "imagebuild schema"


def schema_text() -> str:
    return json.dumps(recipe_format.json_schema(), indent=2) + "\n"


def site_schema_text() -> str:
    return json.dumps(site_spec.json_schema(), indent=2) + "\n"


def schema_files(project: Path) -> list[generated.GeneratedFile]:
    """Every JSON Schema this command writes, with its intended bytes."""
    return [generated.GeneratedFile(project / SCHEMA_PATH, schema_text(), REGENERATE),
            generated.GeneratedFile(project / SITE_SCHEMA_PATH, site_schema_text(),
                                    REGENERATE)]


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("schema", help="write the JSON Schemas of recipes and site profiles")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 2 naming every stale or missing schema (CI)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    project = args.project_dir
    files = schema_files(project)
    if args.check:
        generated.check(files, project)
        print(f"{len(files)} schema file(s) up to date")
        return 0
    written = {item.path for item in generated.write_all(files)}
    for item in files:
        state = "wrote" if item.path in written else "unchanged"
        print(f"{state} {generated.display_path(item.path, project)}")
    return 0
