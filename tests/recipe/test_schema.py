"""The shipped JSON Schema agrees with the validator on every recipe file we have."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from imagebuild.commands.schema import SCHEMA_PATH, schema_text

ROOT = Path(__file__).resolve().parents[2]
BAD = Path(__file__).parent / "fixtures" / "bad"

# Problems only visible after `extends` is merged, or before YAML becomes data: a schema
# checks one file at a time, so these files are schema-valid on their own.
MERGE_LEVEL = {"extends-cycle", "missing-parent", "missing-required",
               "hipblaslt-without-targets", "cpu-without-index", "plugin-on-cpu-image",
               "yaml-syntax", "duplicate-key", "builds-without-packages",
               "plugin-rccl-on-libfabric-2", "untested-target-on-therock",
               "hipblaslt-options-before-their-release"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / SCHEMA_PATH).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_schema_is_current() -> None:
    assert (ROOT / SCHEMA_PATH).read_text() == schema_text(), "run `imagebuild schema`"


@pytest.mark.parametrize("path", sorted((ROOT / "recipes").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_recipe_files_pass_the_schema(path: Path, validator) -> None:
    errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
    assert not errors, [e.message for e in errors]


@pytest.mark.parametrize("case", sorted(p.name for p in BAD.iterdir()
                                        if p.is_dir() and p.name not in MERGE_LEVEL))
def test_schema_rejects_what_the_validator_rejects(case: str, validator) -> None:
    data = yaml.safe_load((BAD / case / "recipe.yaml").read_text())
    assert list(validator.iter_errors(data)), f"schema accepted {case}"


@pytest.mark.parametrize("case", sorted(MERGE_LEVEL - {"yaml-syntax", "duplicate-key", "builds-without-packages",
               "plugin-rccl-on-libfabric-2", "untested-target-on-therock",
               "hipblaslt-options-before-their-release"}))
def test_merge_level_problems_are_beyond_a_single_file_schema(case: str, validator) -> None:
    data = yaml.safe_load((BAD / case / "recipe.yaml").read_text())
    assert not list(validator.iter_errors(data))


def test_schema_check_names_every_stale_schema_then_writes_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from imagebuild.cli import main

    assert main(["-C", str(tmp_path), "schema", "--check"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: schema/recipe.schema.json: missing; run `imagebuild schema`",
        "error: schema/site.schema.json: missing; run `imagebuild schema`"]
    assert main(["-C", str(tmp_path), "schema"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "wrote schema/recipe.schema.json", "wrote schema/site.schema.json"]
    (tmp_path / "schema" / "site.schema.json").write_text("{}\n")
    assert main(["-C", str(tmp_path), "schema", "--check"]) == 2
    assert capsys.readouterr().err == ("error: schema/site.schema.json: stale (differs from "
                                       "what its inputs generate now); run `imagebuild schema`\n")
    assert main(["-C", str(tmp_path), "schema"]) == 0
    assert main(["-C", str(tmp_path), "schema", "--check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 schema file(s) up to date"
