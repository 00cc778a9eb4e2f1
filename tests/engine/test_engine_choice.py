"""Every command that opens an engine says when ``auto`` passed Docker over, and why, in the
same words; a missing image then says Docker was unreachable before "build it"; and
``--backend docker`` names the daemon address and the system's reason, not the SDK's text.

Docker is really unreachable here (DOCKER_HOST names a socket that does not exist, and the
real docker SDK tries it); podman is a stand-in script on PATH that knows no images.
"""

from __future__ import annotations

import gc
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagebuild.cli import main
from tests.render.conftest import FIXTURES

# docker-py's UnixHTTPConnection.connect leaves its socket unclosed when connect() fails
# (https://github.com/docker/docker-py/blob/main/docker/transport/unixconn.py): the SDK's
# leak on every probe of a dead socket, reported when the socket is collected.
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning",
                                        "ignore::pytest.PytestUnraisableExceptionWarning")



@pytest.fixture(autouse=True)
def collect_the_sdks_sockets() -> Iterator[None]:
    """Collected within the test, where the marks above apply, not at the session's end."""
    yield
    gc.collect()


DEAD = "unix:///nonexistent.sock"
REASON = f"docker daemon not reachable at DOCKER_HOST={DEAD}: no such file or directory"

PODMAN = """#!/bin/sh
# podman 4.3.1 holding no images
case "$1 $2" in
  "version --format") echo 4.3.1 ;;
  "image exists") exit 1 ;;
  "image inspect") echo "Error: $3: image not known" >&2; exit 125 ;;
  "images --format") echo "[]" ;;
  *) echo "podman stand-in: unexpected $*" >&2; exit 125 ;;
esac
"""


@pytest.fixture
def podman_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Docker unreachable, a podman stand-in first on PATH; its path."""
    tools = tmp_path / "standin"
    tools.mkdir()
    podman = tools / "podman"
    podman.write_text(PODMAN)
    podman.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/sbin:/usr/bin:/sbin:/bin")
    monkeypatch.setenv("DOCKER_HOST", DEAD)
    monkeypatch.delenv("IMAGEBUILD_BACKEND", raising=False)
    monkeypatch.setenv("IMAGEBUILD_CACHE", str(tmp_path / "cache"))
    return str(podman)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CPU fixture project (a locked recipe, never built here)."""
    root = tmp_path / "cpu"
    shutil.copytree(FIXTURES, root)
    monkeypatch.chdir(tmp_path)
    return root


def note(podman: str) -> str:
    return f"imagebuild: docker not used: {REASON}; using podman 4.3.1 ({podman})"


def test_squash_says_why_podman_and_that_docker_was_unreachable(
        podman_only: str, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(project), "squash", "cpu-test"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        note(podman_only),
        "error: podman: no image 'imagebuild/cpu-test:latest' here",
        ("hint: Docker was not reachable, so only podman was asked: if the image was built "
        "with Docker, start its daemon or point DOCKER_HOST at it; else build it first: "
        "imagebuild build cpu-test")]
    assert not (project / "artifacts").exists()


def test_validate_says_why_podman(podman_only: str, project: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(project), "validate", "example.org/never/pulled:1", "--cpu"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == note(podman_only)
    assert err[-2:] == [
        "error: podman: no image 'example.org/never/pulled:1' here",
        ("hint: Docker was not reachable, so only podman was asked: if the image was built "
        "with Docker, start its daemon or point DOCKER_HOST at it; else pull it first "
        "(podman pull example.org/never/pulled:1), or name a recipe, a .sqsh or a .sif")]


def test_clean_and_the_build_plan_say_why_podman(podman_only: str, project: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(project), "clean", "images"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [note(podman_only)]
    assert "nothing removed without --yes" in captured.out
    assert main(["-C", str(project), "build", "cpu-test", "--plan"]) == 0
    captured = capsys.readouterr()
    assert note(podman_only) in captured.err.splitlines()
    assert "nothing was built" in captured.out


def test_a_chosen_docker_backend_names_the_address_not_the_sdk_exception(
        podman_only: str, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(project), "squash", "cpu-test", "--backend", "docker"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: no usable docker backend: {REASON}",
        "hint: start the daemon, point DOCKER_HOST at it, or pass --backend podman"]


def test_an_explicit_podman_backend_says_nothing_about_docker(
        podman_only: str, project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-C", str(project), "squash", "cpu-test", "--backend", "podman"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: podman: no image 'imagebuild/cpu-test:latest' here",
        "hint: build it first: imagebuild build cpu-test"]
