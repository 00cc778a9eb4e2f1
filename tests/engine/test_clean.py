"""`imagebuild clean` against a real Docker engine: it lists this project's images with
their sizes, keeps each recipe's latest build, and removes only with --yes."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine


@pytest.mark.integration
def test_clean_lists_then_removes_all_but_the_latest_build(
        docker_engine: DockerEngine, base_image: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"clean-test-{uuid.uuid4().hex[:8]}"
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / f"{name}.yaml").write_text("version: 1\n")
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / f"{name}.sqsh").write_bytes(b"x" * 4096)
    monkeypatch.setenv("IMAGEBUILD_CACHE", str(tmp_path / "cache"))
    old, latest = f"imagebuild/{name}:0000old", f"imagebuild/{name}:latest"
    docker_engine.tag(base_image, old)
    # the latest build: another image id (an image of one more layer)
    built = docker_engine.client.containers.run(base_image, ["touch", "/built"], detach=True)
    built.wait()
    built.commit(f"imagebuild/{name}", "latest")
    built.remove()
    try:
        assert main(["-C", str(tmp_path), "clean", "--backend", "docker"]) == 0
        out = capsys.readouterr().out
        assert old in out and latest in out and "kept: the recipe's latest build" in out
        assert f"{tmp_path / 'artifacts'}" in out
        assert "nothing removed without --yes" in out
        assert docker_engine.image_exists(old)
        assert main(["-C", str(tmp_path), "clean", "--backend", "docker", "--yes"]) == 0
        assert "removed 2" in capsys.readouterr().out
        assert not docker_engine.image_exists(old) and docker_engine.image_exists(latest)
        assert not (tmp_path / "artifacts").exists()
        assert docker_engine.image_exists(base_image)  # another repository: untouched
    finally:
        docker_engine.remove(old)
        docker_engine.remove(latest)
