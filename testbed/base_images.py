"""Real container engines for tests: a started Docker daemon, podman, a loopback registry,
and a Debian base image made without Docker Hub.

The base image is ``debootstrap --variant=minbase bookworm`` (plus python3, python3-venv,
ca-certificates: the end-to-end image needs a Python, bookworm's is 3.11) packed into a
tarball cached under ``$IMAGEBUILD_TEST_CACHE`` (default ``~/.cache/imagebuild-test``), then
``docker import``-ed (and ``podman import``-ed) as ``imagebuild-test/debian:bookworm`` and
pushed to the registry as ``127.0.0.1:5000/imagebuild-test/debian:bookworm`` so recipes
can name a real registry and pin a digest. ``TRIXIE`` is made the same way: Debian trixie
packages HIP and RCCL, so the network-plugin stage builds on it. Everything is reused when present; a file lock
keeps parallel test sessions from debootstrapping twice.

The tests reach these through the pytest fixtures in tests/support/engine_env.py; the demo
(scripts/demo.py) calls them directly.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import requests

from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.podman import PodmanEngine
from imagebuild.engine.select import open_engine
from imagebuild.errors import EngineError

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_SCRIPT = REPO_ROOT / ".ci" / "setup-system.sh"

REGISTRY = os.environ.get("IMAGEBUILD_TEST_REGISTRY", "127.0.0.1:5000")


@dataclass(frozen=True)
class DebianBase:
    """A minbase Debian release with a few packages, as an image for tests."""

    suite: str
    packages: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates")

    @property
    def image(self) -> str:
        return f"imagebuild-test/debian:{self.suite}"

    @property
    def registry_image(self) -> str:
        return f"{REGISTRY}/{self.image}"


BOOKWORM = DebianBase("bookworm")
TRIXIE = DebianBase("trixie")
BASE_IMAGE = BOOKWORM.image
REGISTRY_BASE_IMAGE = BOOKWORM.registry_image
#: What docker.io's official debian image sets; `docker import` starts with no config.
IMPORT_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD ["bash"]',
)


def cache_dir() -> Path:
    root = os.environ.get("IMAGEBUILD_TEST_CACHE") or Path.home() / ".cache" / "imagebuild-test"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def _file_lock(name: str) -> Iterator[None]:
    with open(cache_dir() / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources), else the CDN."""
    sources = [Path("/etc/apt/sources.list")]
    sources_d = Path("/etc/apt/sources.list.d")
    if sources_d.is_dir():
        sources += sorted(sources_d.glob("*.sources")) + sorted(sources_d.glob("*.list"))
    for source in sources:
        try:
            text = source.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            urls = [w for w in words if w.startswith(("http://", "https://"))]
            if urls and "/debian" in urls[0] and "security" not in urls[0]:
                return urls[0].rstrip("/")
    return "http://deb.debian.org/debian"


def _run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, capture_output=True, text=True, **kwargs)


def base_rootfs_tarball(base: DebianBase = BOOKWORM) -> Path:
    """The cached debootstrap rootfs tarball (built once: about 20-40 s on a fast mirror)."""
    name = f"debian-{base.suite}-minbase-{'-'.join(base.packages)}.tar"
    tarball = cache_dir() / name
    with _file_lock(f"debootstrap-{base.suite}"):
        if tarball.exists():
            return tarball
        if os.geteuid() != 0:
            raise RuntimeError("making the debootstrap base image needs root (debootstrap chroots)")
        if not shutil.which("debootstrap"):
            raise RuntimeError("debootstrap is not installed (.ci/setup-system.sh installs it)")
        with tempfile.TemporaryDirectory(prefix="debootstrap-", dir=cache_dir()) as tmp:
            rootfs = Path(tmp) / "rootfs"
            try:
                _run(["debootstrap", "--variant=minbase",
                      f"--include={','.join(base.packages)}", base.suite, str(rootfs),
                      debian_mirror()])
            except subprocess.CalledProcessError as exc:
                raise RuntimeError(
                    f"debootstrap failed: {exc.stdout[-2000:]}{exc.stderr[-2000:]}") from exc
            # Like the official image: no downloaded .debs, no package lists (recipes run
            # apt-get update first), so the layer stays small.
            for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
                for item in (rootfs / leftover).glob("*"):
                    if item.is_file():
                        item.unlink()
            partial = tarball.with_suffix(".tar.partial")
            _run(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(partial), "."])
            partial.rename(tarball)
    return tarball


def ensure_docker_daemon() -> str | None:
    """Start dockerd and the registry via .ci/setup-system.sh when root; None when usable."""
    try:
        open_engine("docker")
        return None
    except EngineError as exc:
        reason = str(exc)
    if os.geteuid() == 0 and SETUP_SCRIPT.exists() and shutil.which("dockerd"):
        subprocess.run(["bash", str(SETUP_SCRIPT)], check=False, capture_output=True,
                       env=dict(os.environ, IMAGEBUILD_SKIP_APT="1"), text=True, timeout=180)
        try:
            open_engine("docker")
            return None
        except EngineError as exc:
            reason = str(exc)
    return reason


def registry_up(registry: str = REGISTRY) -> bool:
    try:
        return requests.get(f"http://{registry}/v2/", timeout=3).status_code == 200
    except requests.RequestException:
        return False


def import_base_image_docker(engine: DockerEngine, base: DebianBase = BOOKWORM) -> str:
    with _file_lock("docker-import"):
        if not engine.image_exists(base.image):
            tarball = base_rootfs_tarball(base)
            repository, tag = base.image.split(":")
            with open(tarball, "rb") as data:
                engine.client.api.import_image_from_data(
                    data, repository=repository, tag=tag, changes=list(IMPORT_CHANGES))
    return base.image


def import_base_image_podman(engine: PodmanEngine) -> str:
    with _file_lock("podman-import"):
        if not engine.image_exists(BASE_IMAGE):
            argv = [engine.binary, "import"]
            for change in IMPORT_CHANGES:
                argv += ["--change", change]
            _run(argv + [str(base_rootfs_tarball()), BASE_IMAGE])
    return BASE_IMAGE


def push_base_image(engine: DockerEngine, base: DebianBase = BOOKWORM) -> str:
    """Push the base image to the loopback registry once; returns the registry reference."""
    with _file_lock("registry-push"):
        _, tag = base.registry_image.rsplit(":", 1)
        listed = requests.get(f"http://{REGISTRY}/v2/{base.image.split(':')[0]}/tags/list",
                              timeout=10)
        if listed.status_code != 200 or tag not in (listed.json().get("tags") or []):
            engine.tag(base.image, base.registry_image)
            engine.push(base.registry_image)
    return base.registry_image
