"""A real local world to lock against: an HTTP wheel index shaped like rocm-rel-7.0.2 (wheels
with the dependency metadata of the real ones, testbed.rocm_wheels) plus a PEP 503 "PyPI" for
the transitive dependencies (both on 127.0.0.1), git repositories with tags, and a libfabric
release tarball. No network beyond loopback."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagebuild.lock.options import LockOptions
from testbed.rocm_wheels import make_pypi_index, make_rocm_wheels, pypi_requirements
from tests.support.indexserver import IndexServer, make_wheel

TORCH = "2.8.0+rocm7.0.2.lw.git245bf6ed"
TORCH_OTHER_BUILD = "2.8.0+rocm7.0.2.lw.git1a2b3c4d"
TRITON = "3.4.0+rocm7.0.2.gitf9e5bf54"
PINS = {"torch": TORCH, "triton": TRITON}
BASE_DIGEST = "sha256:" + "ab" * 32

RECIPE = """\
version: 1
rocm: 7.0.2
base_image: registry.example/rocm/dev-ubuntu-24.04:7.0.2-complete@{digest}
wheels:
  index_url: {index}
  packages:
    torch: {torch}
    triton: {triton}
  pypi:
    - tqdm
gpu_targets: [gfx942]
build_packages: [gcc, make]
hipblaslt:
  enabled: true
  repository: {hipblaslt_repo}
  ref: rocm-7.0.2
  blis:
    repository: {blis_repo}
    ref: "5.1"
network_plugin:
  enabled: true
  repository: {plugin_repo}
  ref: v1.18.0
  libfabric:
    version: 2.1.0
    url: {index_root}libfabric-{{version}}.tar.bz2
env:
  PYTHONUNBUFFERED: "1"
"""


def git_repo(path: Path, tag: str, annotated: bool) -> str:
    """A repository with two commits; ``tag`` on the first. Returns the tagged commit."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c",
                               "user.email=t@example.org", *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    path.mkdir(parents=True)
    git("init", "-q", "-b", "main")
    (path / "README").write_text("one\n")
    git("add", "README")
    git("commit", "-qm", "one")
    commit = git("rev-parse", "HEAD")
    git("tag", *(["-a", "-m", "release"] if annotated else []), tag)
    (path / "README").write_text("two\n")
    git("commit", "-qam", "two")
    return commit


@dataclass
class World:
    server: IndexServer
    project: Path
    recipe_path: Path
    options: LockOptions
    hipblaslt_commit: str
    plugin_commit: str
    #: AOCL-BLIS's tagged commit (the clients' CPU reference).
    blis_commit: str

    @property
    def rocm_dir(self) -> Path:
        return self.server.directory / "rocm"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    for key in ("IMAGEBUILD_WHEEL_INDEX", "IMAGEBUILD_PYPI_INDEX", "IMAGEBUILD_GIT_MIRRORS"):
        monkeypatch.delenv(key, raising=False)
    root = tmp_path / "served"
    rocm = root / "rocm"
    rocm.mkdir(parents=True)
    # The recipe's set with the METADATA the real wheels carry, and what makes pinning hard:
    # another build of the same torch version, and a cp310 file.
    make_rocm_wheels(rocm, PINS)
    make_wheel(rocm, "torch", TORCH_OTHER_BUILD)
    make_rocm_wheels(rocm, {"torch": TORCH}, python_tag="cp310")
    make_pypi_index(root / "simple", [*pypi_requirements(PINS), "tqdm"])
    (root / "libfabric-2.1.0.tar.bz2").write_bytes(b"libfabric source " * 1000)
    hip_commit = git_repo(tmp_path / "git" / "rocm-libraries", "rocm-7.0.2", annotated=True)
    plugin_commit = git_repo(tmp_path / "git" / "aws-ofi-nccl", "v1.18.0", annotated=False)
    blis_commit = git_repo(tmp_path / "git" / "blis", "5.1", annotated=True)

    server = IndexServer(root).start()
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    recipe_path = project / "recipes" / "rocm-test.yaml"
    recipe_path.write_text(RECIPE.format(
        digest=BASE_DIGEST, index=server.url_for("rocm/"), index_root=server.url_for(""),
        torch=TORCH, triton=TRITON,
        hipblaslt_repo=f"file://{tmp_path / 'git' / 'rocm-libraries'}",
        plugin_repo=f"file://{tmp_path / 'git' / 'aws-ofi-nccl'}",
        blis_repo=f"file://{tmp_path / 'git' / 'blis'}"))
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(project))
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "2")
    monkeypatch.setenv("IMAGEBUILD_HTTP_TIMEOUT", "2")
    options = LockOptions(pypi_url=server.url_for("simple/"), cache_dir=tmp_path / "cache")
    try:
        yield World(server, project, recipe_path, options, hip_commit, plugin_commit,
                    blis_commit)
    finally:
        server.stop()
