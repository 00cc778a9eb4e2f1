"""Where the in-image runner writes its report when no --report is given: ./reports/ when
the working directory takes files, else the temporary directory, with a note saying so.
(The read-only root itself is exercised under a real enroot in tests/e2e/test_enroot.py.)"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from imagebuild.inimage.run_report import default_report_destination
from tests.support.validate import REPO

WHEN = dt.datetime(2025, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)  # noqa: UP017 (3.10)
NAME = "validate-node_1-20250102T030405Z.json"


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$TMPDIR for the code under test (tempfile caches its choice: reset it)."""
    directory = tmp_path / "tmpdir"
    directory.mkdir()
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return directory


def test_writable_working_directory_keeps_the_usual_path(
        tmp_path: Path, temp_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    path, note = default_report_destination("node/1", WHEN)
    assert (path, note) == (Path("reports") / NAME, None)
    assert (work / "reports").is_dir()
    assert list((work / "reports").iterdir()) == []  # the probe leaves nothing behind


def test_unwritable_working_directory_falls_back_to_the_temporary_directory(
        tmp_path: Path, temp_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file where the reports directory would go: no file can be created there, for root
    # too (permission bits would not stop root, who runs CI).
    work = tmp_path / "work"
    work.mkdir()
    (work / "reports").write_text("not a directory")
    monkeypatch.chdir(work)
    path, note = default_report_destination("node/1", WHEN)
    assert path == temp_dir / "reports" / NAME
    assert path.parent.is_dir()
    assert note is not None
    assert note.startswith("note: cannot write reports/ here (")
    assert str(path) in note and "--report PATH" in note


def test_no_writable_place_keeps_the_usual_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Writing then fails with the reason (the runner reports it and exits 2)."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "reports").write_text("not a directory")
    monkeypatch.chdir(work)

    def no_temporary_directory() -> str:
        raise FileNotFoundError("no usable temporary directory")

    monkeypatch.setattr(tempfile, "gettempdir", no_temporary_directory)
    assert default_report_destination("node/1", WHEN) == (Path("reports") / NAME, None)


def test_the_runner_says_where_it_wrote(tmp_path: Path) -> None:
    """The in-image runner (what the image's `imagebuild` runs) on an unwritable working
    directory: exit 0, a note first, the report in $TMPDIR, its path printed last."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "reports").write_text("not a directory")
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "IMAGEBUILD_MANIFEST"}
    env.update(TMPDIR=str(temp), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "imagebuild.inimage", "--allow-cpu",
                           "--checks", "environment", "--nproc", "1"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = sorted((temp / "reports").glob("validate-*.json"))
    assert len(written) == 1
    assert f"the report goes to {written[0]}" in proc.stderr
    assert proc.stdout.splitlines()[-1] == f"report: {written[0]}"
    assert json.loads(written[0].read_text())["summary"]["exit_code"] == 0
