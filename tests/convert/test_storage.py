"""Reading a Docker image's filesystem straight from overlay2 storage instead of
``docker export``: the same tar members, the same squashfs bytes, nothing left mounted.

The test image is built in layers that exercise what a layered filesystem can do to a read:
whiteouts, an opaque directory, hard links broken by a copy-up, metadata-only changes, a
file capability and a user xattr, names that need PAX or hold spaces and newlines, a FIFO,
a VOLUME, and a WORKDIR the engine creates at container creation.
"""

from __future__ import annotations

import functools
import io
import os
import pwd
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from imagebuild import cli
from imagebuild.convert import storage
from imagebuild.convert.sources import ImageSource
from imagebuild.convert.squashfs import squash_image
from imagebuild.engine.select import open_engine
from imagebuild.errors import EngineError
from imagebuild.process import CommandRunner
from tests.convert.conftest import add_member
from tests.support.enroot import shared_directory
from tests.support.squashfs import Member, members_of_tar, read_squashfs

pytestmark = [pytest.mark.integration, pytest.mark.docker]

LAYERED_IMAGE = "imagebuild-test/squash:layered"
#: An unprivileged user with subordinate IDs (.ci/setup-system.sh makes it for enroot too).
REPO_ROOT = Path(__file__).resolve().parents[2]
ROOTLESS_USER = os.environ.get("IMAGEBUILD_ENROOT_USER", "imagebuild-enroot")
#: cap_net_raw+ep (VFS_CAP_REVISION_2), bytes above 0x7f included.
CAPABILITY = "0100000200200000000000000000000000000000"
LONG = "d" * 120
DOCKERFILE = f"""\
FROM {{base}}
RUN mkdir -p /opt/t/gone-dir/sub /opt/t/opaque /opt/t/{LONG} \\
 && echo gone > /opt/t/gone-dir/sub/f && echo old > /opt/t/opaque/old \\
 && echo x > /opt/t/delete-me && echo shared > /opt/t/link-a && ln /opt/t/link-a /opt/t/link-b \\
 && echo kept > /opt/t/kept-a && ln /opt/t/kept-a /opt/t/kept-b \\
 && echo meta > /opt/t/chmod-me && mkfifo /opt/t/fifo && echo deep > /opt/t/{LONG}/f \\
 && printf s > '/opt/t/name with spaces' && printf u > /opt/t/ünïcödé \\
 && ln -s /opt/t/{LONG}/{LONG}/target /opt/t/long-link \\
 && install -m 4755 /bin/true /opt/t/suid && touch -d @1500000000 /opt/t/old-stamp \\
 && python3 -c "import os; os.setxattr('/opt/t/suid', 'security.capability', \\
bytes.fromhex('{CAPABILITY}')); open('/opt/t/new\\nline', 'w').write('n')"
RUN rm /opt/t/delete-me && rm -rf /opt/t/gone-dir /opt/t/opaque \\
 && mkdir /opt/t/opaque && echo new > /opt/t/opaque/new \\
 && chmod 600 /opt/t/chmod-me && chown 1234:1234 /opt/t/link-a && echo more >> /opt/t/link-b
RUN echo top > /opt/t/top && rm -f /etc/mtab
VOLUME /data
WORKDIR /workspace/not-in-the-image
"""


XATTR_BASE = "imagebuild-test/squash:xattr-base"


@dataclass(frozen=True)
class Layered:
    """The layered test image in one engine, and how that engine reads it."""

    engine: str  # "docker" | "podman"
    image: str
    #: (image, read, runner) -> source, through an engine opened with that runner
    make_source: Callable[..., ImageSource]
    storage_read_by: str  # how a storage read describes itself (prefix)
    export_read_by: str
    #: the user xattr as the engine's export carries it
    exported_user_xattrs: dict[str, bytes]

    def source(self, read: str, runner: CommandRunner | None = None) -> ImageSource:
        return self.make_source(self.image, read, runner)


def _with_user_xattr(exported: IO[bytes], importer: IO[bytes]) -> None:
    """A base image's files plus one carrying a user xattr, as a pulled layer can carry
    it: builds drop every xattr but security.capability when they commit a layer (docker)
    or keep them (podman); an import keeps them."""
    with tarfile.open(fileobj=exported, mode="r|") as src, \
            tarfile.open(fileobj=importer, mode="w|", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        info = tarfile.TarInfo("opt/user-xattr")  # the base image has /opt
        info.mode, info.size = 0o644, 2
        info.pax_headers = {"SCHILY.xattr.user.origin": "test"}
        dst.addfile(info, io.BytesIO(b"u\n"))


def _import(cli: str, base: ImageSource) -> None:
    importer = subprocess.Popen([cli, "import", "-", XATTR_BASE], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL)
    assert importer.stdin is not None
    with base.rootfs_tar() as exported:
        _with_user_xattr(exported, importer.stdin)
    importer.stdin.close()
    assert importer.wait() == 0


@pytest.fixture(scope="session", params=["docker", "podman"])
def layered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Layered:
    if request.param == "docker":
        engine = request.getfixturevalue("docker_engine")
        base = request.getfixturevalue("base_image")
        _import(shutil.which("docker") or "docker", engine.image_source(base, read="export"))
        dockerfile = io.BytesIO(DOCKERFILE.format(base=XATTR_BASE).encode())
        engine.client.images.build(fileobj=dockerfile, tag=LAYERED_IMAGE,
                                   network_mode="host", rm=True)
        # moby's pkg/archive exports security.capability only
        return Layered("docker", LAYERED_IMAGE,
                       lambda image, read, runner: open_engine(
                           "docker", for_build=False, runner=runner,
                           docker_client=engine.client).image_source(image, read),
                       "overlay2 storage, ", "docker export", {})
    engine = request.getfixturevalue("podman_engine")
    base = request.getfixturevalue("podman_base_image")
    _import(engine.binary, engine.image_source(base, read="export"))
    context = tmp_path_factory.mktemp("layered")
    (context / "Containerfile").write_text(DOCKERFILE.format(base=f"localhost/{XATTR_BASE}"))
    subprocess.run([engine.binary, "build", "--network", "host", "--format", "docker",
                    "-t", LAYERED_IMAGE, str(context)], check=True, capture_output=True)
    return Layered("podman", LAYERED_IMAGE,
                   lambda image, read, runner: open_engine(
                       "podman", for_build=False, runner=runner).image_source(image, read),
                   "podman storage", "podman export", {"user.origin": b"test"})


@pytest.fixture
def root_only() -> None:
    if os.geteuid() != 0:
        pytest.fail("reading Docker's overlay2 storage needs root; CI runs the suite as root")


def _tar_members(source: ImageSource) -> dict[str, Member]:
    with source.rootfs_tar() as stream:
        return members_of_tar(stream)


#: Written by the engine when it creates the container that is read (docker's init layer,
#: the missing WORKDIR, the VOLUME's mount point): their mtimes are those of that container,
#: seconds apart between two reads.
_CREATED_PER_CONTAINER = {"", ".dockerenv", "dev", "dev/console", "dev/pts", "dev/shm", "etc",
                          "etc/hostname", "etc/hosts", "etc/mtab", "etc/resolv.conf", "proc",
                          "sys", "workspace", "workspace/not-in-the-image", "data"}


def test_storage_tar_is_the_export_tar(layered: Layered, root_only: None) -> None:
    """Member for member, in the same order: names, types, modes, owners, link targets,
    contents, xattrs; mtimes too, except those of what the engine makes per container."""
    storage_source, export_source = layered.source("storage"), layered.source("export")
    from_storage, from_export = _tar_members(storage_source), _tar_members(export_source)
    assert storage_source.read_by.startswith(layered.storage_read_by)
    assert export_source.read_by == layered.export_read_by
    assert list(from_storage) == list(from_export)  # the same members in the same order
    for name in from_export:
        got, want = from_storage[name], from_export[name]
        if name in _CREATED_PER_CONTAINER:
            got = Member(**{**got.__dict__, "mtime": want.mtime})
        assert got == want, name

    # what the layers did shows through as the engine shows it
    members = from_storage
    assert "opt/t/delete-me" not in members and "opt/t/gone-dir" not in members
    assert [n for n in members if n.startswith("opt/t/opaque/")] == ["opt/t/opaque/new"]
    assert members["opt/t/chmod-me"].mode == 0o600
    assert (members["opt/t/link-a"].uid, members["opt/t/link-b"].type) == (1234, "file")
    assert members["opt/t/kept-b"].type == "hardlink"
    assert members["opt/t/suid"].mode == 0o4755
    assert members["opt/t/suid"].xattrs == {"security.capability": bytes.fromhex(CAPABILITY)}
    assert members["opt/user-xattr"].xattrs == layered.exported_user_xattrs
    assert members["opt/t/fifo"].type == "fifo"
    assert members["opt/t/old-stamp"].mtime == 1_500_000_000
    assert "opt/t/new\nline" in members and f"opt/t/{LONG}/f" in members
    if layered.engine == "docker":
        assert members["etc/mtab"].linkname == "/proc/mounts"  # the init layer's, as exported


def test_same_squashfs_bytes_from_storage_and_export(layered: Layered, root_only: None,
                                                     tmp_path: Path) -> None:
    from_storage = squash_image(layered.source("storage"), tmp_path / "storage.sqsh")
    from_export = squash_image(layered.source("export"), tmp_path / "export.sqsh")
    assert from_storage.artifact.sha256 == from_export.artifact.sha256
    members = read_squashfs(from_storage.artifact.path)
    assert members["opt/t/suid"].xattrs == {"security.capability": bytes.fromhex(CAPABILITY)}
    assert members["opt/t/opaque/new"].data == b"new\n"


def _mounts() -> str:
    return Path("/proc/self/mountinfo").read_text()


def _containers(engine: str) -> str:
    cli_path = shutil.which(engine) or engine
    return subprocess.run([cli_path, "ps", "-aq", "--no-trunc"], capture_output=True,
                          text=True, check=True).stdout


def test_nothing_stays_mounted_or_created(layered: Layered, root_only: None) -> None:
    """Stopped in the middle of a read (Ctrl-C), nothing is left: no mount (docker's lives in
    a private mount namespace, podman's is unmounted), no mount point, no reader process,
    no export container."""
    mounts, tmp = _mounts(), set(Path(tempfile.gettempdir()).glob("imagebuild-read-*"))
    containers = _containers(layered.engine)
    source = layered.source("storage")
    with pytest.raises(KeyboardInterrupt), source.rootfs_tar() as stream:
        stream.read(1 << 16)
        if layered.engine == "docker":
            assert "imagebuild-storage-read" not in _mounts()
        raise KeyboardInterrupt
    assert _mounts() == mounts
    assert set(Path(tempfile.gettempdir()).glob("imagebuild-read-*")) == tmp
    assert _containers(layered.engine) == containers
    assert not subprocess.run(["pgrep", "-f", "--", "tar --create --file=-"], capture_output=True,
                              check=False).stdout


def test_cli_says_how_it_read(layered: Layered, root_only: None, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    for read, said in (("storage", layered.storage_read_by), ("export", layered.export_read_by)):
        code = cli.main(["-C", str(tmp_path), "squash", layered.image, "--formats", "sqsh",
                         "--backend", layered.engine, "--read", read,
                         "--output-dir", str(tmp_path / read)])
        assert code == 0
        assert f"read: {said}" in capsys.readouterr().out
    digests = {(tmp_path / r / "imagebuild-test+squash+layered.sqsh.sha256").read_text().split()[0]
               for r in ("storage", "export")}
    assert len(digests) == 1


class RefusingRunner(CommandRunner):
    """Runs everything as usual, but the storage mount meets a refusing kernel."""

    def capture(self, argv, **kwargs):  # type: ignore[no-untyped-def]
        if "probe" in argv:
            argv = ["sh", "-c", "echo 'mount: permission denied' >&2; exit 32"]
        return super().capture(argv, **kwargs)


def test_a_refused_mount_falls_back_to_export(layered: Layered, root_only: None) -> None:
    """auto reads through the engine when the kernel or a sandbox refuses the mount;
    storage says why and what to do."""
    auto = layered.source("auto", runner=RefusingRunner())
    with auto.rootfs_tar() as stream:
        assert stream.read(512)
    assert auto.read_by == layered.export_read_by
    forced = layered.source("storage", runner=RefusingRunner())
    with pytest.raises(EngineError) as caught, forced.rootfs_tar():
        pass
    assert "the mount failed: mount: permission denied" in str(caught.value)
    assert "--read export" in (caught.value.hint or "")


# --- where storage cannot be read: unit checks on GraphDriver data ----------------------------

def _graph(root: Path, layers: int, name: str = "overlay2") -> dict:
    dirs = []
    for index in range(layers):
        layer = root / f"layer{index}"
        (layer / "diff").mkdir(parents=True)
        (layer / "link").write_text(f"L{index:025d}")
        dirs.append(str(layer / "diff"))
    return {"Name": name, "Data": {"UpperDir": dirs[0], "LowerDir": ":".join(dirs[1:])}}


def test_layers_from_graph_driver(tmp_path: Path) -> None:
    layers = storage.overlay_layers(_graph(tmp_path, 3), euid=0)
    assert layers.root == tmp_path
    assert layers.links == ("l/L" + "0" * 25, "l/L" + "0" * 24 + "1", "l/L" + "0" * 24 + "2")
    assert layers.mount_options == "ro,lowerdir=" + ":".join(layers.links)


@pytest.mark.parametrize(("graph", "euid", "said"), [
    ("overlay2", 1000, "needs root (uid 1000)"),
    ("vfs", 0, "storage driver is vfs, not overlay2"),
    ("missing-link", 0, "is not readable here"),
    ("too-many", 0, "do not fit in one overlay mount"),
    ("userns", 0, "remaps user namespaces (userns-remap)"),
])
def test_why_storage_cannot_be_read(tmp_path: Path, graph: str, euid: int, said: str) -> None:
    data = _graph(tmp_path, 200 if graph == "too-many" else 2,
                  name="vfs" if graph == "vfs" else "overlay2")
    if graph == "missing-link":
        (tmp_path / "layer1" / "link").unlink()
    # as `docker info` says it with --userns-remap=default
    options = ("name=seccomp,profile=default", "name=userns") if graph == "userns" else ()
    with pytest.raises(storage.StorageUnavailable, match=re.escape(said)):
        storage.overlay_layers(data, euid=euid, security_options=options)


@pytest.fixture
def busybox_tar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A tar on PATH that is not GNU tar (busybox's has no --sort)."""
    fake = tmp_path / "bin" / "tar"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'tar (busybox) 1.36.1'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    storage._gnu_tar_sorts.cache_clear()
    yield
    storage._gnu_tar_sorts.cache_clear()


def test_storage_needs_gnu_tar(tmp_path: Path, busybox_tar: None) -> None:
    with pytest.raises(storage.StorageUnavailable, match="not GNU tar 1.28 or newer"):
        storage.overlay_layers(_graph(tmp_path, 2), euid=0)
    with pytest.raises(storage.StorageUnavailable, match="not GNU tar 1.28 or newer"):
        storage.podman_read("podman", "c0ffee", rootless=True)


# --- rootless podman, as HPC login nodes run it -------------------------------------------------

ROOTLESS_IMAGE = "localhost/imagebuild-test/rootless:storage"


def _rootless_rootfs(path: Path) -> None:
    """A small image of what a user's rootless storage must map back: owners other than
    root (stored under the user's subordinate IDs), setuid, a hard link, a user xattr."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        add = functools.partial(add_member, tar, {})
        add("bin", "dir", mode=0o755)
        add("bin/tool", data=b"tool", mode=0o4755)
        add("bin/tool-link", "hardlink", mode=0o4755, link="bin/tool")
        add("home", "dir", mode=0o755)
        add("home/alice", "dir", mode=0o700, uid=1234, gid=1234)
        add("home/alice/notes", data=b"alice", uid=1234, gid=1234,
            xattrs={"user.origin": b"test"})
        add("etc", "dir", mode=0o755)
        add("etc/tool", "symlink", mode=0o777, link="../bin/tool")


def _imagebuild_as_user() -> list[str]:
    """imagebuild for another user: this venv's interpreter may sit in root's home (pyenv),
    so the system's Python of the same version runs this checkout with the venv's packages."""
    system = Path("/usr/bin/python3")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    said = subprocess.run([str(system), "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
                          capture_output=True, text=True, check=False).stdout.strip()
    assert said == version, f"{system} is Python {said or 'missing'}, the suite's venv {version}"
    path = f"{REPO_ROOT}:{sysconfig.get_paths()['purelib']}:{sysconfig.get_paths()['platlib']}"
    return ["env", f"PYTHONPATH={path}", str(system), "-m", "imagebuild"]


@pytest.fixture
def rootless_work() -> Iterator[Path]:
    """A directory the unprivileged user may enter (pytest's own are root's alone)."""
    work = shared_directory("imagebuild-rootless-")
    yield work
    shutil.rmtree(work, ignore_errors=True)


def test_rootless_podman_reads_storage_in_its_user_namespace(rootless_work: Path) -> None:
    """As an unprivileged user with rootless podman (its storage owned by subordinate IDs),
    ``imagebuild squash`` reads through ``podman unshare`` + ``podman mount`` and writes the
    bytes ``podman export`` gives, owners mapped back."""
    user, work = pwd.getpwnam(ROOTLESS_USER), rootless_work
    _rootless_rootfs(work / "rootfs.tar")
    # podman's state for this test only (rootless overlay, as on a login node): its own
    # storage, database and runtime directories, whatever the user's home holds
    (work / "storage.conf").write_text(f'[storage]\ndriver = "overlay"\nrunroot = "{work}/run"'
                                       f'\ngraphroot = "{work}/storage"\n')
    (work / "containers.conf").write_text(f'[engine]\nstatic_dir = "{work}/libpod"\n'
                                          f'tmp_dir = "{work}/tmp"\n')
    (work / "xdg").mkdir(mode=0o700)
    for path in (work, work / "storage.conf", work / "containers.conf", work / "xdg"):
        os.chown(path, user.pw_uid, user.pw_gid)
    as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups",
               "env", "-i", f"HOME={user.pw_dir}", "PATH=/usr/local/bin:/usr/bin:/bin",
               f"TMPDIR={work}", "LC_ALL=C.UTF-8", f"XDG_RUNTIME_DIR={work}/xdg",
               f"CONTAINERS_STORAGE_CONF={work}/storage.conf",
               f"CONTAINERS_CONF={work}/containers.conf"]

    def run(*argv: str) -> str:
        done = subprocess.run([*as_user, *argv], cwd=work, capture_output=True, text=True,
                              check=False, timeout=600)
        assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
        return done.stdout

    run("podman", "import", str(work / "rootfs.tar"), ROOTLESS_IMAGE)
    digests = {}
    for read, said in (("storage", "read: podman storage (podman mount in podman unshare)"),
                       ("export", "read: podman export")):
        out = run(*_imagebuild_as_user(), "-C", str(work), "squash", ROOTLESS_IMAGE,
                  "--backend", "podman", "--read", read, "--output-dir", str(work / read))
        assert said in out, out
        sqsh = work / read / "localhost+imagebuild-test+rootless+storage.sqsh"
        digests[read] = (sqsh.parent / (sqsh.name + ".sha256")).read_text().split()[0]
    assert digests["storage"] == digests["export"]
    members = read_squashfs(work / "storage" / "localhost+imagebuild-test+rootless+storage.sqsh")
    assert (members["home/alice/notes"].uid, members["bin/tool"].mode) == (1234, 0o4755)
    assert members["home/alice/notes"].xattrs == {"user.origin": b"test"}
    assert members["bin/tool-link"].type == "hardlink"
    assert not run("podman", "unshare", "podman", "mount").strip()  # nothing left mounted
    assert not run("podman", "ps", "-aq").strip()  # nor a container
    run("podman", "unshare", "rm", "-rf", str(work / "storage"))  # files of subordinate IDs


def test_timings_say_where_the_seconds_went(layered: Layered, root_only: None,
                                            tmp_path: Path) -> None:
    """The phases add up to the total; the reader's and the compressor's CPU are their own
    (a storage read's tar is a child; an export's reader is the engine, not ours)."""
    for read in ("storage", "export"):
        result = squash_image(layered.source(read), tmp_path / f"{read}.sqsh")
        timings = result.artifact.timings
        assert timings is not None and result.timings == timings
        assert timings.read_by == result.artifact.timings.read_by != ""
        phases = timings.config_s + timings.stream_s + timings.publish_s
        assert abs(phases - timings.total_s) < 0.01
        assert result.artifact.seconds == timings.total_s
        assert timings.tool_cpu_s > 0 and timings.filter_cpu_s > 0
        if read == "storage" or layered.engine == "podman":
            assert timings.reader_cpu_s > 0  # tar under unshare, or podman export
        else:
            assert timings.reader_cpu_s < timings.tool_cpu_s / 10  # docker export: dockerd's
        assert f"read: {timings.read_by}" in timings.line()
