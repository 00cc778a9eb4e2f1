"""Fixtures for the wheel index client tests: a real HTTP index shaped like rocm-rel-7.0.2."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.lock.cache import DownloadCache
from testbed.rocm_wheels import rocm_requires
from tests.support import indexserver
from tests.support.indexserver import IndexServer, make_wheel

index_server = indexserver.index_server  # the shared fixture, made visible to these tests

# Short timeouts and no backoff keep the fault tests fast; a stall fault lasts longer than
# READ_TIMEOUT, so every stalled attempt really times out.
RETRIES = 2
READ_TIMEOUT = 0.5
FAST = {"retries": RETRIES, "timeout": (2.0, READ_TIMEOUT), "backoff": 0.0}

TORCH = "2.8.0+rocm7.0.2.lw.git245bf6ed"
TORCH_OTHER_BUILD = "2.8.0+rocm7.0.2.lw.git1a2b3c4d"
TORCH_CP312 = f"torch-{TORCH}-cp312-cp312-linux_x86_64.whl"
SET_702 = {"torch": TORCH, "triton": "3.4.0+rocm7.0.2.gitf9e5bf54",
           "torchvision": "0.23.0+rocm7.0.2.git824e8c87",
           "torchaudio": "2.8.0+rocm7.0.2.git6e1c7fe9"}


@pytest.fixture(autouse=True)
def _no_ambient_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("IMAGEBUILD_HTTP_RETRIES", "IMAGEBUILD_HTTP_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("IMAGEBUILD_CACHE", str(tmp_path / "default-cache"))


@pytest.fixture
def cache(tmp_path: Path) -> DownloadCache:
    return DownloadCache(tmp_path / "cache", **FAST)


def populate_rocm_702(directory: Path) -> None:
    """cp312 files of rocm-rel-7.0.2 (with the dependency metadata of the real ones; both
    torchvision releases: 0.23.0 built for torch 2.8, 0.24.0 for torch 2.9), plus what makes
    pinning hard: a second torch build of the same version, cp310 variants, an sdist and a
    subdirectory."""
    make_wheel(directory, "torch", TORCH, requires=rocm_requires("torch", SET_702),
               payload_size=300_000)
    make_wheel(directory, "torch", TORCH_OTHER_BUILD)
    make_wheel(directory, "torch", TORCH, python_tag="cp310")
    make_wheel(directory, "torch", "2.7.1+rocm7.0.2.lw.git2a215e4a")
    for name in ("triton", "torchvision", "torchaudio"):
        make_wheel(directory, name, SET_702[name], requires=rocm_requires(name, SET_702))
    make_wheel(directory, "triton", "3.4.0+rocm7.0.2.gitf9e5bf54", python_tag="cp310")
    make_wheel(directory, "torchvision", "0.24.0+rocm7.0.2.gitb919bd0c",
               requires=rocm_requires("torchvision", {"torch": "2.9.0"}))
    make_wheel(directory, "apex", "1.9.0a0+rocm7.0.2.git07c3ee53")
    (directory / "apex-1.9.0a0+rocm7.0.2.git07c3ee53.tar.gz").write_bytes(b"not a wheel")
    (directory / "README.txt").write_text("not a wheel either\n")
    (directory / "old").mkdir()
    make_wheel(directory / "old", "torch", "2.6.0+rocm6.4.1.git1ded221d")


@pytest.fixture
def rocm_index(index_server: IndexServer) -> IndexServer:
    populate_rocm_702(index_server.directory)
    return index_server
