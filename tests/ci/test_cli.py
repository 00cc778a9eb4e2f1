"""`imagebuild ci`, `--check` and `ci affected` through the real CLI, on a copy of the
project (and a real git repository for the change detection)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from imagebuild.ci.config import PROJECT_CONFIG
from imagebuild.ci.gitlab import GITLAB_FILE

from .conftest import NEW_RECIPE, commit_all, git


def test_committed_ci_files_are_current(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository's own ci/ matches its recipes and configuration."""
    from tests.support.linters import REPO_ROOT

    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(REPO_ROOT))
    code, out, err = cli("ci", "--check")
    assert (code, err) == (0, ""), err
    assert "3 generated files current" in out


def test_generate_then_check(project: Path, cli) -> None:
    for path in ("ci/github/imagebuild.yml", GITLAB_FILE):
        (project / path).unlink()
    code, _, err = cli("ci", "--check")
    assert code == 2
    assert err.splitlines() == [
        "error: ci/github/imagebuild.yml: missing; run `imagebuild ci`",
        f"error: {GITLAB_FILE}: missing; run `imagebuild ci`"]
    code, out, _ = cli("ci")
    assert code == 0
    assert out.splitlines() == ["ci/github/imagebuild.yml: written",
                                f"{GITLAB_FILE}: written",
                                "ci/actionlint.yaml: unchanged"]
    assert cli("ci", "--check")[0] == 0
    assert cli("ci")[1].count("unchanged") == 3


def test_hand_edit_is_stale(project: Path, cli) -> None:
    path = project / GITLAB_FILE
    path.write_text(path.read_text().replace("timeout: 6h", "timeout: 9h"))
    code, _, err = cli("ci", "--check")
    assert code == 2
    assert err.splitlines() == [(f"error: {GITLAB_FILE}: stale (differs from what its "
                                "inputs generate now); run `imagebuild ci`")]


def test_config_change_makes_every_file_stale(project: Path, cli) -> None:
    (project / PROJECT_CONFIG).write_text("version: 1\nvalidate:\n  gpu: false\n")
    code, _, err = cli("ci", "--check")
    assert code == 2 and len(err.splitlines()) == 3


def test_added_recipe_appears_in_both_matrices(git_project: Path, cli) -> None:
    """A new ROCm release is a short file: no code change, both pipelines pick it up."""
    project = git_project
    base = git(project, "rev-parse", "HEAD")
    workflow_before = (project / "ci/github/imagebuild.yml").read_text()
    (project / "recipes" / "rocm-9.9.9.yaml").write_text(NEW_RECIPE)

    code, _, err = cli("ci", "--check")
    assert code == 2
    assert err.splitlines() == [(f"error: {GITLAB_FILE}: stale (differs from what its "
                                "inputs generate now); run `imagebuild ci`")]
    assert cli("ci")[0] == 0
    assert cli("ci", "--check")[0] == 0

    gitlab = (project / GITLAB_FILE).read_text()
    assert "imagebuild:build:rocm-9.9.9:" in gitlab and "RECIPE: rocm-9.9.9" in gitlab
    assert re.search(r"^# input recipes/rocm-9\.9\.9\.yaml +sha256:", gitlab, re.MULTILINE)
    # GitHub: the workflow is unchanged; its plan job puts the recipe in the matrix.
    assert (project / "ci/github/imagebuild.yml").read_text() == workflow_before
    commit_all(project, "add rocm 9.9.9")
    code, out, err = cli("ci", "affected", "--base", base)
    assert code == 0
    assert json.loads(out) == {"include": [{"recipe": "rocm-9.9.9", "rocm": "9.9.9",
                                            "python": "3.12"}]}
    assert "rocm-9.9.9: recipes/rocm-9.9.9.yaml changed" in err


def test_affected_follows_parents_and_writes_github_output(
        git_project: Path, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = git_project
    base = git(project, "rev-parse", "HEAD")
    common = project / "recipes" / "_common.yaml"
    common.write_text(common.read_text().replace("PYTHONUNBUFFERED", "PYTHONFAULTHANDLER"))
    commit_all(project, "shared parent")
    output = tmp_path / "github_output"
    output.write_text("earlier=1\n")
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    code, out, _err = cli("ci", "affected", "--base", base, "--github-output")
    assert code == 0
    names = [entry["recipe"] for entry in json.loads(out)["include"]]
    assert names == ["rocm-10.1.0", "rocm-6.4.4", "rocm-7.0.2", "rocm-7.0.2-swiss-ai",
                     "rocm-7.1.1", "rocm-7.14.1", "rocm-7.14.1-py3.13", "rocm-7.14.1-py3.14",
                     "rocm-7.2.4"]
    lines = output.read_text().splitlines()
    assert lines[0] == "earlier=1" and lines[2] == "any=true"
    assert json.loads(lines[1].removeprefix("matrix=")) == json.loads(out)


def test_unrelated_change_builds_nothing(git_project: Path, cli, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    base = git(git_project, "rev-parse", "HEAD")
    (git_project / "README.md").write_text("docs\n")
    commit_all(git_project, "docs")
    output = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    code, out, err = cli("ci", "affected", "--base", base, "--github-output")
    assert code == 0
    assert json.loads(out) == {"include": []}
    assert "no recipe affected" in err
    assert output.read_text().splitlines()[1] == "any=false"


def test_renamed_recipe_counts_on_both_sides(git_project: Path, cli) -> None:
    base = git(git_project, "rev-parse", "HEAD")
    git(git_project, "mv", "recipes/rocm-7.1.1.yaml", "recipes/rocm-7.1.2.yaml")
    commit_all(git_project, "rename")
    names = [e["recipe"] for e in json.loads(cli("ci", "affected", "--base", base)[1])["include"]]
    assert names == ["rocm-7.1.2"]  # the old name no longer exists to build


@pytest.mark.parametrize("base, why", [
    ("", "no base commit"),
    ("0" * 40, "no base commit"),
    ("1234567890abcdef1234567890abcdef12345678", "cannot diff against"),
])
def test_unknown_base_builds_everything(git_project: Path, cli, base: str, why: str) -> None:
    code, out, err = cli("ci", "affected", "--base", base)
    assert code == 0
    assert len(json.loads(out)["include"]) == 9
    assert why in err


def test_requested_recipes(git_project: Path, cli) -> None:
    code, out, _ = cli("ci", "affected", "--recipes", "rocm-7.1.1, rocm-6.4.4")
    assert [e["recipe"] for e in json.loads(out)["include"]] == ["rocm-7.1.1", "rocm-6.4.4"]
    assert len(json.loads(cli("ci", "affected", "--recipes", "all")[1])["include"]) == 9
    code, _, err = cli("ci", "affected", "--recipes", "rocm-7.1")
    assert code == 2
    assert err.startswith("error: unknown recipe(s) rocm-7.1; known: rocm-10.1.0, rocm-6.4.4")


def test_github_output_outside_github(git_project: Path, cli,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    code, _, err = cli("ci", "affected", "--recipes", "all", "--github-output")
    assert code == 2 and "GITHUB_OUTPUT is not set" in err


def test_broken_recipe_stops_generation(project: Path, cli) -> None:
    (project / "recipes" / "rocm-7.0.2.yaml").write_text("version: 1\nextends: _common\n"
                                                         "rocm: seven\n")
    code, _, err = cli("ci")
    assert code == 2
    assert "rocm-7.0.2.yaml:3: rocm: expected a ROCm release" in err


@pytest.mark.parametrize("base", ["--output=/tmp/x", "HEAD; rm -rf /"])
def test_base_cannot_become_a_git_option(git_project: Path, cli, base: str) -> None:
    code, _, err = cli("ci", "affected", f"--base={base}")
    assert code == 2
    assert err.startswith(f"error: --base: {base!r} is not a commit or ref name")
