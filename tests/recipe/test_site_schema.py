"""Site profiles have a format like recipes: a spec (imagebuild.recipe.site_spec), the
committed JSON Schema made from it (schema/site.schema.json), and one-line errors with file,
line and key path for every problem at once.

One fixture folder per failure (tests/recipe/fixtures/bad-sites/<case>/): site.yaml and
expected.txt with the exact lines the error carries.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from imagebuild.cli import main
from imagebuild.commands.schema import SITE_SCHEMA_PATH, site_schema_text
from imagebuild.errors import SiteProfileError
from imagebuild.recipe.site import load_site, parse_site, site_names

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "imagebuild" / "data" / "sites"
BAD = Path(__file__).parent / "fixtures" / "bad-sites"
CASES = sorted(p.name for p in BAD.iterdir() if p.is_dir())
# Rules across fields, or problems before YAML becomes data: beyond a one-file schema.
BEYOND_THE_SCHEMA = {"yaml-syntax", "duplicate-key", "libfabric-without-version"}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / SITE_SCHEMA_PATH).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_committed_site_schema_is_current() -> None:
    assert (ROOT / SITE_SCHEMA_PATH).read_text() == site_schema_text(), "run `imagebuild schema`"


@pytest.mark.parametrize("path", sorted(SHIPPED.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_site_files_pass_the_schema_and_the_validator(path: Path, validator) -> None:
    errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
    assert not errors, [e.message for e in errors]
    assert load_site(path.stem).name == path.stem


def test_every_shipped_site_is_found() -> None:
    assert {p.stem for p in SHIPPED.glob("*.yaml")} <= set(site_names())


@pytest.mark.parametrize("case", CASES)
def test_bad_site_message(case: str) -> None:
    folder = BAD / case
    with pytest.raises(SiteProfileError) as caught:
        parse_site((folder / "site.yaml").read_bytes(), "sites/here.yaml")
    expected = (folder / "expected.txt").read_text()
    assert str(caught.value) + "\n" == expected, f"--- expected\n{expected}--- got\n{caught.value}"


@pytest.mark.parametrize("case", sorted(set(CASES) - BEYOND_THE_SCHEMA))
def test_schema_rejects_what_the_validator_rejects(case: str, validator) -> None:
    data = yaml.safe_load((BAD / case / "site.yaml").read_text())
    assert list(validator.iter_errors(data)), f"schema accepted {case}"


def test_every_case_has_expected_output() -> None:
    assert CASES and all((BAD / case / "expected.txt").is_file() for case in CASES)


def test_a_project_site_error_reaches_the_cli_as_lines(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through `imagebuild render --site`: one `error:` line per problem, exit code 2."""
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "here.yaml").write_text(
        (BAD / "many-problems" / "site.yaml").read_text())
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "cpu.yaml").write_text(
        "version: 1\nrocm: null\nbase_image: debian:bookworm\n"
        "wheels: {index_url: 'https://download.pytorch.org/whl/cpu', "
        "packages: {torch: 2.8.0}}\n")
    assert main(["-C", str(tmp_path), "render", "--site", "here"]) == 2
    errors = capsys.readouterr().err.splitlines()
    expected = (BAD / "many-problems" / "expected.txt").read_text().splitlines()
    assert errors == [f"error: {line}" for line in expected]
