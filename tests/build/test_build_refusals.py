"""`imagebuild build --squash` refuses, before any engine is opened, what would make its squash
fail after the build: a missing squash or SIF tool, an output directory it cannot write, too
little room, an unknown format. The engine seam records whether it was ever asked."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from imagebuild.cli import main
from tests.engine.fakes import ReplayEngine
from tests.render.conftest import FIXTURES

RECIPE = "cpu-test"


@pytest.fixture
def cpu_project(tmp_path: Path) -> Path:
    """The CPU fixture project: a locked recipe, so the build gets as far as its squash."""
    root = tmp_path / "cpu"
    shutil.copytree(FIXTURES, root)
    return root


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every engine the build opens (none should be), as a replay engine with no builds."""
    calls: list[Any] = []

    def open_engine(*args: Any, **kwargs: Any) -> ReplayEngine:
        calls.append((args, kwargs))
        return ReplayEngine([])

    monkeypatch.setattr("imagebuild.commands.engine_choice.open_engine", open_engine)
    monkeypatch.setattr("imagebuild.build.pipeline.open_engine", open_engine)
    return calls


def build(project: Path, *args: str) -> int:
    return main(["-C", str(project), "build", RECIPE, *args])


def test_missing_squash_tools_refuse_the_build(cpu_project: Path, opened: list[Any],
                                               monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PATH", "")
    assert build(cpu_project, "--squash", "sqsh") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --squash sqsh: tar2sqfs or mksquashfs not found on PATH",
        ("hint: install squashfs-tools-ng (tar2sqfs) or squashfs-tools >= 4.5 (mksquashfs "
         "-tar); nothing was built")]
    assert opened == [] and not (cpu_project / "artifacts").exists()


def test_a_missing_sif_tool_refuses_the_build(cpu_project: Path, opened: list[Any],
                                              monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    tools = tmp_path / "bin"  # a squashfs tool, but neither apptainer nor siftool
    tools.mkdir()
    os.symlink("/usr/bin/tar2sqfs", tools / "tar2sqfs")
    monkeypatch.setenv("PATH", str(tools))
    assert build(cpu_project, "--squash", "sqsh,sif") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "error: --squash sqsh,sif: neither apptainer nor siftool found on PATH"
    assert opened == []


def test_an_output_directory_it_cannot_make_refuses_the_build(
        cpu_project: Path, opened: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    blocker = cpu_project / "artifacts"
    blocker.write_text("a file where the directory would go")
    assert build(cpu_project, "--squash", "sqsh", "--output-dir", str(blocker / "out")) == 2
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: --output-dir {blocker / 'out'}: {blocker} is a file, not a directory")
    assert opened == []


def test_too_little_room_refuses_the_build(cpu_project: Path, opened: list[Any],
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("imagebuild.convert.readiness.free_bytes", lambda _: 1 << 20)
    assert build(cpu_project, "--squash", "sqsh") == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: --output-dir {cpu_project / 'artifacts'}: 0.0 GiB free")
    assert err[0].endswith("--squash sqsh needs about 1.0 GiB (no earlier build of cpu-test "
                           "recorded there: at least 1.0 GiB per file, 1 file)")
    assert opened == []


def test_an_unknown_format_names_the_option_build_has(
        cpu_project: Path, opened: list[Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert build(cpu_project, "--squash", "sqsh,foo") == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --squash: expected a comma-separated list of sqsh, sif, got 'sqsh,foo'"]
    assert opened == []
