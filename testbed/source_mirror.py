"""An air-gapped site's source mirror on 127.0.0.1, made from the upstream fixtures.

../shared/fixtures/sources holds git bundles (aws/aws-ofi-nccl, ROCm/aws-ofi-rccl, Megatron-LM's
Swiss AI fork and ROCm port, ROCm/rccl-tests) and
libfabric release archives. A site without GitHub serves such copies itself; imagebuild
reaches them through its mirror option (``imagebuild lock --git-mirror FROM=TO``), which
rewrites the recipe's URLs into the lock, so the build fetches from here too:

- ``git daemon`` serves bare clones of the bundles as ``git://127.0.0.1:PORT/<owner>/<repo>.git``
  (upload-pack must allow fetching a commit by id: the build fetches the locked commit at
  depth 1);
- an HTTP server serves the archives under GitHub's release layout
  (``/libfabric/v1.22.0/libfabric-1.22.0.tar.bz2``), and RCCL's example tuner as
  ``/rccl-ext-tuner/rccl-ext-tuner.tar.gz`` (``tuner_url``; a recipe names that URL itself).
"""

from __future__ import annotations

import os
import socket
import subprocess
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
)
LIBFABRIC_RELEASES = ("1.22.0", "2.1.0")
LIBFABRIC_DOWNLOADS = "https://github.com/ofiwg/libfabric/releases/download/"
#: RCCL's example tuner plugin (ext-tuner/example), a source archive.
TUNER_ARCHIVE = "rccl-ext-tuner.tar.gz"


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
        tuner = self.workdir / "http" / "rccl-ext-tuner" / TUNER_ARCHIVE
        if not tuner.exists():
            tuner.parent.mkdir(parents=True, exist_ok=True)
            tuner.symlink_to(self.fixtures / TUNER_ARCHIVE)
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
    def tuner_url(self) -> str:
        """The example tuner's archive over HTTP."""
        assert self._http is not None, "start() the mirror first"
        return f"{self._http.url.rstrip('/')}/rccl-ext-tuner/{TUNER_ARCHIVE}"

    @property
    def mirrors(self) -> dict[str, str]:
        """Prefix rewrites for ``--git-mirror``: GitHub's git URLs to the git daemon, its
        libfabric release downloads to the HTTP server (the longer prefix wins)."""
        assert self._http is not None, "start() the mirror first"
        return {
            "https://github.com/": f"git://127.0.0.1:{self.git_port}/",
            LIBFABRIC_DOWNLOADS: f"{self._http.url.rstrip('/')}/libfabric/",
        }
