"""imagebuild.generated: the shared helper for every generated, committed file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from imagebuild.generated import (
    MARKER,
    GeneratedFile,
    Input,
    check_all,
    diff,
    display_path,
    header,
    write_all,
)


def test_header_names_inputs_and_how_to_regenerate():
    text = header([Input("recipes/a.yaml", "sha256:" + "1" * 64, note="extends recipes/_b.yaml"),
                   Input("recipes/pylock.a.toml", "UNLOCKED")], "imagebuild render a")
    assert text.splitlines() == [
        f"# {MARKER}",
        "# Regenerate: imagebuild render a",
        f"# input recipes/a.yaml         sha256:{'1' * 64}  (extends recipes/_b.yaml)",
        "# input recipes/pylock.a.toml  UNLOCKED",
    ]
    assert header([], "x", comment="//").startswith(f"// {MARKER}\n")


def test_write_all_writes_changed_files_only(tmp_path: Path):
    same = tmp_path / "same.txt"
    same.write_text("kept\n")
    os.utime(same, (1_000_000, 1_000_000))
    items = [GeneratedFile(same, "kept\n"), GeneratedFile(tmp_path / "new" / "deep.txt", "new\n")]
    written = write_all(items)
    assert [w.path.name for w in written] == ["deep.txt"]
    assert (tmp_path / "new" / "deep.txt").read_text() == "new\n"
    assert same.stat().st_mtime == 1_000_000  # untouched: make-style tools see no change
    assert write_all(items) == []
    assert not list(tmp_path.rglob(".*.tmp"))


def test_write_is_atomic_and_leaves_no_temporary_on_failure(tmp_path: Path, monkeypatch):
    target = tmp_path / "file.txt"
    target.write_text("old\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_all([GeneratedFile(target, "new\n")])
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]


def test_check_all_names_missing_and_stale_files_with_the_fix(tmp_path: Path):
    (tmp_path / "stale.txt").write_text("old\n")
    (tmp_path / "ok.txt").write_text("same\n")
    items = [GeneratedFile(tmp_path / "ok.txt", "same\n", "gen ok"),
             GeneratedFile(tmp_path / "stale.txt", "new\n", "gen stale"),
             GeneratedFile(tmp_path / "missing.txt", "x\n", "gen missing")]
    assert check_all(items, tmp_path) == [
        "stale.txt: stale (differs from what its inputs generate now); run `gen stale`",
        "missing.txt: missing; run `gen missing`",
    ]


def test_diff_is_unified_and_empty_when_current(tmp_path: Path):
    path = tmp_path / "f.txt"
    path.write_text("a\nb\n")
    assert diff(GeneratedFile(path, "a\nb\n"), tmp_path) == ""
    text = diff(GeneratedFile(path, "a\nc\n"), tmp_path)
    assert "--- f.txt (committed)" in text and "+++ f.txt (generated)" in text
    assert "-b\n" in text and "+c\n" in text


def test_display_path_is_relative_inside_root_only(tmp_path: Path):
    assert display_path(tmp_path / "x" / "y", tmp_path) == "x/y"
    assert display_path(Path("/elsewhere/z"), tmp_path) == "/elsewhere/z"
