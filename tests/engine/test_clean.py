"""`imagebuild clean`: it lists this project's images with their sizes, keeps each recipe's
latest build, and removes only with --yes; against a real Docker engine, and at the engine
seam for a run without one."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.base import ListedImage
from imagebuild.engine.docker import DockerEngine
from tests.engine.fakes import ReplayEngine


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


class HoldingEngine(ReplayEngine):
    """An engine holding listed images (the seam `clean` lists and removes through)."""

    def __init__(self, listed: list[ListedImage]):
        super().__init__([])
        self.listed = listed
        self.removed: list[str] = []

    def list_images(self, repository: str) -> list[ListedImage]:
        return [i for i in self.listed if i.ref.startswith(f"{repository}:")]

    def remove(self, ref: str) -> None:
        self.removed.append(ref)


def test_clean_at_the_engine_seam_keeps_the_latest_build_and_removes_only_with_yes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Without Docker: the table, the kept latest build, another repository untouched, and
    the cache and artifacts removed with --yes only."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "demo.yaml").write_text("version: 1\n")
    (tmp_path / "artifacts").mkdir()
    (tmp_path / "artifacts" / "demo.sqsh").write_bytes(b"x" * 3 * 1024 * 1024)
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    (cache / "wheels" / "torch.whl").write_bytes(b"w" * 2048)
    monkeypatch.setenv("IMAGEBUILD_CACHE", str(cache))
    engine = HoldingEngine([
        ListedImage("imagebuild/demo:0000old", "sha256:" + "1" * 64, 5 << 30),
        ListedImage("imagebuild/demo:latest", "sha256:" + "2" * 64, 6 << 30),
        ListedImage("imagebuild/demo:1111new", "sha256:" + "2" * 64, 6 << 30),
        ListedImage("imagebuild/other:latest", "sha256:" + "3" * 64, 1 << 30)])
    monkeypatch.setattr("imagebuild.commands.engine_choice.open_engine",
                        lambda *args, **kwargs: engine)
    assert main(["-C", str(tmp_path), "clean"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[1]: line for line in out[1:-1]}
    assert "5.0 GiB" in rows["imagebuild/demo:0000old"]
    assert rows["imagebuild/demo:latest"].endswith(
        "kept: the recipe's latest build (--all-images removes it)")
    assert "kept: the recipe's latest build" in rows["imagebuild/demo:1111new"]  # same id
    assert "imagebuild/other:latest" not in rows  # no recipe of this project
    assert "2.0 KiB" in rows[str(cache)] and "3.0 MiB" in rows[str(tmp_path / "artifacts")]
    assert out[-1] == ("3 to remove (5.0 GiB; images share layers, so they free less); "
                       "nothing removed without --yes")
    assert engine.removed == [] and cache.exists() and (tmp_path / "artifacts").exists()
    assert main(["-C", str(tmp_path), "clean", "--yes"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "removed 3 (5.0 GiB)"
    assert engine.removed == ["imagebuild/demo:0000old"]
    assert not cache.exists() and not (tmp_path / "artifacts").exists()
