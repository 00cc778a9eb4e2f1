"""A Docker daemon of a test's own: a fresh CI runner, whose build cache can be thrown away
without touching the machine's shared dockerd.

Debian 12's dockerd (20.10) cannot export a build cache to a registry, and its docker client
has no buildx. Debian trixie's dockerd 26.1, containerd 1.7 and buildx 0.13 can (buildx's
docker driver exports caches when the daemon keeps images in the containerd image store);
they link only against bookworm's own libraries. .ci/setup-system.sh unpacks the three
packages into ``BINARIES_ENV`` (default /opt/imagebuild-buildkit) without installing
them, so the shared dockerd and docker client stay as they are.

``PrivateDocker(workdir)`` starts containerd and dockerd with their own sockets, state and
data directories under ``workdir``; ``env`` points DOCKER_HOST at that daemon and
DOCKER_CONFIG at a directory holding the buildx plugin; ``fresh()`` stops both, deletes
everything they stored and starts them again: an engine that never built anything.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

BINARIES_ENV = "IMAGEBUILD_BUILDKIT_ROOT"
DEFAULT_BINARIES = Path("/opt/imagebuild-buildkit")
#: Where the packages put their programs, below the unpacked root.
CONTAINERD = "usr/bin/containerd"
DOCKERD = "usr/sbin/dockerd"
BUILDX = "usr/libexec/docker/cli-plugins/docker-buildx"


def binaries_root() -> Path:
    """The unpacked packages; FileNotFoundError naming what is missing and how to get it."""
    root = Path(os.environ.get(BINARIES_ENV) or DEFAULT_BINARIES)
    missing = [name for name in (CONTAINERD, DOCKERD, BUILDX) if not (root / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{', '.join(str(root / m) for m in missing)} missing: .ci/setup-system.sh unpacks "
            f"Debian trixie's containerd, docker.io and docker-buildx there (or set "
            f"{BINARIES_ENV})")
    return root


class PrivateDocker:
    """containerd + dockerd (containerd image store) under ``workdir``; needs root."""

    def __init__(self, workdir: Path, binaries: Path | None = None):
        self.workdir = Path(workdir)
        self.binaries = binaries or binaries_root()
        self.socket = self.workdir / "docker.sock"
        self.config = self.workdir / "client"
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to build on this daemon with buildx."""
        return {"DOCKER_HOST": f"unix://{self.socket}", "DOCKER_CONFIG": str(self.config)}

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(wipe=True)

    def _path(self) -> str:
        return os.pathsep.join([str(self.binaries / "usr/bin"), str(self.binaries / "usr/sbin"),
                                os.environ.get("PATH", os.defpath)])

    def start(self) -> None:
        state = self.workdir / "state"
        state.mkdir(parents=True, exist_ok=True)
        plugins = self.config / "cli-plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        if not (plugins / "docker-buildx").exists():
            (plugins / "docker-buildx").symlink_to(self.binaries / BUILDX)
        (state / "containerd.toml").write_text(
            'version = 2\n'
            f'root = "{state / "containerd-root"}"\n'
            f'state = "{state / "containerd-state"}"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{state / "containerd.sock"}"\n'
            f'[ttrpc]\n  address = "{state / "containerd.sock.ttrpc"}"\n')
        (state / "daemon.json").write_text(json.dumps(
            {"features": {"containerd-snapshotter": True}}))
        env = dict(os.environ, PATH=self._path())
        self._spawn("containerd", [str(self.binaries / CONTAINERD), "--config",
                                   str(state / "containerd.toml")], env)
        self._wait(lambda: (state / "containerd.sock").is_socket(), "containerd")
        # No bridge and no iptables, like the machine's own dockerd: builds use the host's
        # network.
        self._spawn("dockerd", [
            str(self.binaries / DOCKERD), "--config-file", str(state / "daemon.json"),
            "--containerd", str(state / "containerd.sock"),
            "--data-root", str(state / "docker-root"), "--exec-root", str(state / "exec"),
            "--pidfile", str(state / "dockerd.pid"), "-H", f"unix://{self.socket}",
            "--bridge=none", "--iptables=false", "--ip6tables=false"], env)
        self._wait(self._answers, "dockerd")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        log = open(self.workdir / f"{name}.log", "ab")  # noqa: SIM115 - the daemon keeps it
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        self._processes[name] = process

    def _answers(self) -> bool:
        """dockerd's ``/_ping`` over its socket (no SDK client: one made while the daemon
        starts would leave its socket behind when its constructor fails)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(2)
                probe.connect(str(self.socket))
                probe.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
                return probe.recv(64).split(b"\r\n", 1)[0].endswith(b" 200 OK")
        except OSError:
            return False

    def _wait(self, ready, name: str, seconds: float = 60) -> None:
        deadline = time.monotonic() + seconds
        while not ready():
            process = self._processes.get(name)
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{name} exited; its log: {self.workdir / (name + '.log')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer within {seconds:.0f} s; its log: "
                                   f"{self.workdir / (name + '.log')}")
            time.sleep(0.2)

    def stop(self, wipe: bool = False) -> None:
        """Stop dockerd, then containerd (the processes this object started); ``wipe``:
        delete what they stored."""
        for name in ("dockerd", "containerd"):
            process = self._processes.pop(name, None)
            if process is None:
                continue
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if wipe:
            state = self.workdir / "state"
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                      if line.split()[1].startswith(str(state) + "/")]
            for mount in sorted(mounts, reverse=True):
                subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
            shutil.rmtree(state, ignore_errors=True)

    def fresh(self) -> None:
        """A daemon that never built anything: no images, no build cache."""
        self.stop(wipe=True)
        self.start()
