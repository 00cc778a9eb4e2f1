"""Real container engines for tests: a started Docker daemon, podman, a loopback registry,
and a Debian base image made without Docker Hub.

The base image is ``debootstrap --variant=minbase bookworm`` (plus python3, python3-venv,
ca-certificates: the end-to-end image needs a Python, bookworm's is 3.11) packed into a
tarball cached under ``$IMAGEBUILD_TEST_CACHE`` (default ``~/.cache/imagebuild-test``), then
``docker import``-ed (and ``podman import``-ed) as ``imagebuild-test/debian:bookworm`` and
pushed to the registry as ``127.0.0.1:5000/imagebuild-test/debian:bookworm`` so recipes
can name a real registry and pin a digest. ``TRIXIE`` and ``SID_EXPERIMENTAL`` are made the
same way: Debian packages HIP and RCCL (trixie: HIP 5.7.1, RCCL 5.4.3; experimental: ROCm
7.2.4), so the network-plugin stage builds on them. ``SID_EXPERIMENTAL`` adds experimental
to the image's apt sources at pin priority 100, below sid's 500, so a recipe takes a package
from there only by naming its version; its apt does not check Valid-Until (the mirror's
sid and experimental Release files are past it). Measured here: debootstrap of sid, 33 s;
the image, 168 MB. Everything is reused when present; a file lock keeps parallel test
sessions from debootstrapping twice.

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
    #: Further suites in the image's apt sources (same mirror), each with its apt pin
    #: priority: at 100, apt takes a package from there only when asked for that version
    #: (``name=version``, ``-t``) or when nothing else provides it.
    extra_suites: tuple[tuple[str, int], ...] = ()
    #: False where the mirror's Release files are past their Valid-Until (a frozen copy of
    #: sid or experimental): the image's apt is told not to check, or ``apt-get update``
    #: refuses the lists. Stable releases carry no Valid-Until.
    check_valid_until: bool = True

    @property
    def tag(self) -> str:
        return "-".join([self.suite, *(suite for suite, _ in self.extra_suites)])

    @property
    def image(self) -> str:
        return f"imagebuild-test/debian:{self.tag}"

    @property
    def registry_image(self) -> str:
        return f"{REGISTRY}/{self.image}"


BOOKWORM = DebianBase("bookworm")
TRIXIE = DebianBase("trixie")
#: sid with experimental, where Debian carries ROCm 7.2.4 (HIP, RCCL 2.27.7 as librccl1
#: 7.2.4-1~exp3); sid itself has HIP 6.4.3 and RCCL 5.4.3. The mirror's sid and
#: experimental Release files are past Valid-Until.
SID_EXPERIMENTAL = DebianBase("sid", extra_suites=(("experimental", 100),),
                              check_valid_until=False)
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
    name = f"debian-{base.tag}-minbase-{'-'.join(base.packages)}.tar"
    tarball = cache_dir() / name
    with _file_lock(f"debootstrap-{base.tag}"):
        if tarball.exists():
            return tarball
        if os.geteuid() != 0:
            raise RuntimeError("making the debootstrap base image needs root (debootstrap chroots)")
        if not shutil.which("debootstrap"):
            raise RuntimeError("debootstrap is not installed (.ci/setup-system.sh installs it)")
        with tempfile.TemporaryDirectory(prefix="debootstrap-", dir=cache_dir()) as tmp:
            rootfs = Path(tmp) / "rootfs"
            mirror = debian_mirror()
            try:
                _run(["debootstrap", "--variant=minbase",
                      f"--include={','.join(base.packages)}", base.suite, str(rootfs), mirror])
            except subprocess.CalledProcessError as exc:
                raise RuntimeError(
                    f"debootstrap failed: {exc.stdout[-2000:]}{exc.stderr[-2000:]}") from exc
            _write_apt_config(rootfs, base, mirror)
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


def _write_apt_config(rootfs: Path, base: DebianBase, mirror: str) -> None:
    """The base's further suites, their pins and the Valid-Until setting, as files of the
    image (debootstrap wrote the suite's own sources.list)."""
    apt = rootfs / "etc" / "apt"
    for suite, priority in base.extra_suites:
        (apt / "sources.list.d" / f"{suite}.list").write_text(f"deb {mirror} {suite} main\n")
        (apt / "preferences.d" / suite).write_text(
            f"Package: *\nPin: release a={suite}\nPin-Priority: {priority}\n")
    if not base.check_valid_until:
        (apt / "apt.conf.d" / "99no-check-valid-until").write_text(
            "# The mirror's Release files are past Valid-Until (a frozen copy).\n"
            'Acquire::Check-Valid-Until "false";\n')


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
