"""An air-gapped site's source mirror on 127.0.0.1, made from the upstream fixtures.

../shared/fixtures/sources holds git bundles (aws/aws-ofi-nccl, ROCm/aws-ofi-rccl, Megatron-LM's
Swiss AI fork and ROCm port, ROCm/rccl-tests, HPE's three CXI repositories) and
libfabric release archives. A site without GitHub serves such copies itself; imagebuild
reaches them through its mirror option (``imagebuild lock --git-mirror FROM=TO``), which
rewrites the recipe's URLs into the lock, so the build fetches from here too:

- ``git daemon`` serves bare clones of the bundles as ``git://127.0.0.1:PORT/<owner>/<repo>.git``
  (upload-pack must allow fetching a commit by id: the build fetches the locked commit at
  depth 1);
- an HTTP server serves the archives under GitHub's release layout
  (``/libfabric/v1.22.0/libfabric-1.22.0.tar.bz2``);
- RCCL's example tuner (rccl-ext-tuner.tar.gz: RCCL's ext-tuner/ files at their upstream
  paths) is served as ``ROCm/rccl.git``: a repository of one commit holding those files,
  tagged with each ROCm release a recipe names (``TUNER_TAGS``), so a recipe's
  ``rccl_tuner: {repository: https://github.com/ROCm/rccl.git, ref: rocm-7.2.4}`` locks and
  builds from it like from RCCL itself (a sparse checkout of ext-tuner/example).
"""

from __future__ import annotations

import os
import socket
import subprocess
import tarfile
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from testbed.wheel_index import IndexServer

REPO_ROOT = Path(__file__).resolve().parents[1]
#: (bundle file, path under the git base directory: the GitHub owner/name.git)
BUNDLES = (
    ("aws-ofi-nccl.bundle", "aws/aws-ofi-nccl.git"),
    ("aws-ofi-rccl.bundle", "ROCm/aws-ofi-rccl.git"),
    ("megatron-lm-swiss-ai.bundle", "swiss-ai/Megatron-LM.git"),
    ("megatron-lm-rocm.bundle", "ROCm/Megatron-LM.git"),
    ("rccl-tests.bundle", "ROCm/rccl-tests.git"),
    ("shs-cassini-headers.bundle", "HewlettPackard/shs-cassini-headers.git"),
    ("shs-cxi-driver.bundle", "HewlettPackard/shs-cxi-driver.git"),
    ("shs-libcxi.bundle", "HewlettPackard/shs-libcxi.git"),
)
LIBFABRIC_RELEASES = ("1.22.0", "2.1.0", "2.6.0")
LIBFABRIC_DOWNLOADS = "https://github.com/ofiwg/libfabric/releases/download/"
#: RCCL's example tuner plugin (ext-tuner/example), a source archive.
TUNER_ARCHIVE = "rccl-ext-tuner.tar.gz"
#: The tags the mirror's ROCm/rccl.git carries: the ROCm releases the recipes name.
TUNER_TAGS = ("rocm-6.4.4", "rocm-7.0.2", "rocm-7.1.1", "rocm-7.2.4")
#: A fixed author and date: the same fixture gives the same commit.
_FIXED_COMMIT_ENV = {"GIT_AUTHOR_NAME": "imagebuild testbed", "GIT_AUTHOR_EMAIL": "testbed@invalid",
                     "GIT_COMMITTER_NAME": "imagebuild testbed",
                     "GIT_COMMITTER_EMAIL": "testbed@invalid",
                     "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
                     "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z"}


def tuner_repository(archive: Path, bare: Path) -> Path:
    """A bare repository standing in for ROCm/rccl: one commit of the archive's files at
    their upstream paths (ext-tuner/...), tagged ``TUNER_TAGS``."""
    work = bare.with_name(bare.name + ".work")
    with tarfile.open(archive) as opened:
        opened.extractall(work, filter="data")
    tree = work / "rccl-ext-tuner"
    env = {**os.environ, **_FIXED_COMMIT_ENV}

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tree), *args], check=True, env=env,
                       capture_output=True)

    git("init", "-q", "-b", "develop")
    git("add", "-A")
    git("commit", "-q", "-m", f"RCCL's ext-tuner files from {archive.name} (PROVENANCE.txt)")
    for tag in TUNER_TAGS:
        git("tag", tag)
    subprocess.run(["git", "clone", "-q", "--bare", str(tree), str(bare)], check=True)
    return bare


def fixtures_dir() -> Path:
    """../shared/fixtures/sources beside the checkout (IMAGEBUILD_SOURCE_FIXTURES overrides)."""
    configured = os.environ.get("IMAGEBUILD_SOURCE_FIXTURES")
    return Path(configured) if configured else REPO_ROOT.parent / "shared" / "fixtures" / "sources"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class SourceMirror:
    """``with SourceMirror(workdir) as mirror:`` serves the fixtures; ``mirror.mirrors`` is
    the FROM -> TO map for ``imagebuild lock --git-mirror``."""

    def __init__(self, workdir: Path, fixtures: Path | None = None):
        self.workdir = Path(workdir)
        self.fixtures = fixtures or fixtures_dir()
        self._daemon: subprocess.Popen[bytes] | None = None
        self._http: IndexServer | None = None
        self.git_port = 0

    def start(self) -> Self:
        missing = [name for name, _ in BUNDLES if not (self.fixtures / name).is_file()]
        missing += [f"libfabric-{v}.tar.bz2" for v in LIBFABRIC_RELEASES
                    if not (self.fixtures / f"libfabric-{v}.tar.bz2").is_file()]
        missing += [] if (self.fixtures / TUNER_ARCHIVE).is_file() else [TUNER_ARCHIVE]
        if missing:
            raise FileNotFoundError(f"source fixtures missing in {self.fixtures}: "
                                    f"{', '.join(missing)}")
        git_root = self.workdir / "git"
        for bundle, target in BUNDLES:
            bare = git_root / target
            if not bare.exists():
                subprocess.run(["git", "clone", "-q", "--bare", str(self.fixtures / bundle),
                                str(bare)], check=True)
                # The build fetches the locked commit by id, at depth 1.
                subprocess.run(["git", "-C", str(bare), "config", "uploadpack.allowAnySHA1InWant",
                                "true"], check=True)
        http_root = self.workdir / "http" / "libfabric"
        for version in LIBFABRIC_RELEASES:
            name = f"libfabric-{version}.tar.bz2"
            target = http_root / f"v{version}" / name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(self.fixtures / name)
        rccl = git_root / "ROCm" / "rccl.git"
        if not rccl.exists():
            tuner_repository(self.fixtures / TUNER_ARCHIVE, rccl)
        # The build fetches the locked commit by id, at depth 1, blob-less: partial clone.
        for key in ("uploadpack.allowAnySHA1InWant", "uploadpack.allowFilter"):
            subprocess.run(["git", "-C", str(rccl), "config", key, "true"], check=True)
        self.git_port = _free_port()
        self._daemon = subprocess.Popen(
            ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={git_root}",
             "--listen=127.0.0.1", f"--port={self.git_port}", str(git_root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._http = IndexServer(self.workdir / "http").start()
        self._wait_for_git()
        return self

    def _wait_for_git(self) -> None:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.git_port), timeout=1).close()
                return
            except OSError:
                if self._daemon is not None and self._daemon.poll() is not None:
                    break
                time.sleep(0.1)
        raise RuntimeError(f"git daemon did not listen on 127.0.0.1:{self.git_port}")

    def stop(self) -> None:
        if self._daemon is not None:
            self._daemon.terminate()
            self._daemon.wait(timeout=10)
            self._daemon = None
        if self._http is not None:
            self._http.stop()
            self._http = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    @property
    def mirrors(self) -> dict[str, str]:
        """Prefix rewrites for ``--git-mirror``: GitHub's git URLs to the git daemon, its
        libfabric release downloads to the HTTP server (the longer prefix wins)."""
        assert self._http is not None, "start() the mirror first"
        return {
            "https://github.com/": f"git://127.0.0.1:{self.git_port}/",
            LIBFABRIC_DOWNLOADS: f"{self._http.url.rstrip('/')}/libfabric/",
        }
