"""An image that is not there is named, with what to do, before any work: nothing is pulled
implicitly, and no engine error text stands in for the answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine

REPO = Path(__file__).resolve().parents[2]
ABSENT = "imagebuild-test/never-built:none"


@pytest.mark.integration
@pytest.mark.parametrize("command", [["squash", "--backend", "docker"], ["validate"]],
                         ids=["squash", "validate"])
def test_an_image_the_engine_lacks_is_named_with_how_to_get_it(
        command: list[str], docker_engine: DockerEngine, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    assert not docker_engine.image_exists(ABSENT)
    monkeypatch.chdir(tmp_path)
    code = main(["-C", str(tmp_path), command[0], ABSENT, *command[1:]])
    err = capsys.readouterr().err.splitlines()
    assert code == 2
    assert err[-2:] == [f"error: docker: no image '{ABSENT}' here",
                   (f"hint: pull it first (docker pull {ABSENT}), or name a recipe, a .sqsh "
                    "or a .sif")]
    assert not docker_engine.image_exists(ABSENT)  # and nothing was pulled
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_a_recipe_never_built_says_to_build_it(
        docker_engine: DockerEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "never-built.yaml").write_text(
        "version: 1\nrocm: null\nbase_image: debian:bookworm\npython: '3.11'\n"
        "wheels: {index_url: 'http://127.0.0.1:9/simple/', packages: {torch: 2.5.1+cpu}}\n")
    monkeypatch.chdir(tmp_path)
    assert not docker_engine.image_exists("imagebuild/never-built:latest")
    code = main(["-C", str(tmp_path), "squash", "never-built", "--backend", "docker"])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: docker: no image 'imagebuild/never-built:latest' here",
        "hint: build it first: imagebuild build never-built"]


def test_a_missing_image_file_is_no_such_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("nothere.sqsh", "nothere.sif"):
        assert main(["-C", str(REPO), "validate", name]) == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0] == f"error: {name}: no such file"
        assert err[1].startswith("hint: build and squash it first")
