"""The OCI provenance labels a build adds: from the CI's variables, else a real git checkout;
never a credential; the date from the lock, not the clock."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from imagebuild.build.oci_labels import (
    CREATED,
    REVISION,
    SOURCE,
    created,
    oci_labels,
    without_credentials,
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "recipe.yaml").write_text("a\n")
    git(repo, "add", "recipe.yaml")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-qm", "one")
    git(repo, "remote", "add", "origin",
        "https://gitlab-ci-token:glcbt-SECRET@gitlab.example.org/hpc/images.git")
    return repo


def test_labels_from_a_git_checkout(checkout: Path) -> None:
    labels = oci_labels(checkout, 1747699200, environ={})
    assert labels == {CREATED: "2025-05-20T00:00:00Z",
                      REVISION: git(checkout, "rev-parse", "HEAD"),
                      SOURCE: "https://gitlab.example.org/hpc/images.git"}
    assert "SECRET" not in str(labels)


def test_a_changed_tracked_file_marks_the_revision_dirty(checkout: Path) -> None:
    (checkout / "recipe.yaml").write_text("b\n")
    (checkout / "untracked.txt").write_text("x\n")
    assert oci_labels(checkout, None, environ={})[REVISION].endswith("-dirty")
    (checkout / "recipe.yaml").write_text("a\n")
    assert not oci_labels(checkout, None, environ={})[REVISION].endswith("-dirty")


def test_the_ci_names_source_and_revision(checkout: Path) -> None:
    github = {"GITHUB_SHA": "c0ffee", "GITHUB_SERVER_URL": "https://github.com",
              "GITHUB_REPOSITORY": "org/images"}
    assert oci_labels(checkout, None, environ=github) == {
        REVISION: "c0ffee", SOURCE: "https://github.com/org/images"}
    gitlab = {"CI_COMMIT_SHA": "beef", "CI_PROJECT_URL": "https://gitlab.example.org/hpc/images"}
    assert oci_labels(checkout, None, environ=gitlab) == {
        REVISION: "beef", SOURCE: "https://gitlab.example.org/hpc/images"}


def test_outside_git_only_the_date_is_known(tmp_path: Path) -> None:
    assert oci_labels(tmp_path, 0, environ={}) == {CREATED: "1970-01-01T00:00:00Z"}
    assert oci_labels(tmp_path, None, environ={}) == {}


@pytest.mark.parametrize(("url", "expected"), [
    ("https://user:tok@host.example/a.git", "https://host.example/a.git"),
    ("https://host.example/a.git", "https://host.example/a.git"),
    ("git@github.com:org/a.git", "git@github.com:org/a.git"),
    ("ssh://git@host.example/a.git", "ssh://host.example/a.git"),
])
def test_without_credentials(url: str, expected: str) -> None:
    assert without_credentials(url) == expected


def test_created_is_rfc3339_utc() -> None:
    assert created(86400 + 3600 + 61) == "1970-01-02T01:01:01Z"
