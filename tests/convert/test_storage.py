"""Reading a Docker image's filesystem straight from overlay2 storage instead of
``docker export``: the same tar members, the same squashfs bytes, nothing left mounted.

The test image is built in layers that exercise what a layered filesystem can do to a read:
whiteouts, an opaque directory, hard links broken by a copy-up, metadata-only changes, a
file capability and a user xattr, names that need PAX or hold spaces and newlines, a FIFO,
a VOLUME, and a WORKDIR the engine creates at container creation.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from imagebuild import cli
from imagebuild.convert import storage
from imagebuild.convert.sources import DockerSource
from imagebuild.convert.squashfs import squash_image
from imagebuild.engine.runner import CommandRunner
from imagebuild.errors import EngineError
from tests.support.squashfs import Member, members_of_tar, read_squashfs

pytestmark = [pytest.mark.integration, pytest.mark.docker]

LAYERED_IMAGE = "imagebuild-test/squash:layered"
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


@pytest.fixture(scope="session")
def xattr_base(docker_engine, base_image: str) -> str:  # type: ignore[no-untyped-def]
    """The base image plus a file carrying a user xattr, as a pulled layer can: builds drop
    every xattr but security.capability when they commit a layer, an import keeps them."""
    importer = subprocess.Popen([shutil.which("docker") or "docker", "import", "-", XATTR_BASE],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert importer.stdin is not None
    with DockerSource(base_image, read="export").rootfs_tar() as exported, \
            tarfile.open(fileobj=exported, mode="r|") as src, \
            tarfile.open(fileobj=importer.stdin, mode="w|", format=tarfile.PAX_FORMAT) as dst:
        for member in src:
            dst.addfile(member, src.extractfile(member) if member.isreg() else None)
        info = tarfile.TarInfo("opt/user-xattr")  # the base image has /opt
        info.mode, info.size = 0o644, 2
        info.pax_headers = {"SCHILY.xattr.user.origin": "test"}
        dst.addfile(info, io.BytesIO(b"u\n"))
    importer.stdin.close()
    assert importer.wait() == 0
    return XATTR_BASE


@pytest.fixture(scope="session")
def layered_image(docker_engine, xattr_base: str) -> str:  # type: ignore[no-untyped-def]
    dockerfile = io.BytesIO(DOCKERFILE.format(base=xattr_base).encode())
    docker_engine.client.images.build(fileobj=dockerfile, tag=LAYERED_IMAGE,
                                      network_mode="host", rm=True)
    return LAYERED_IMAGE


@pytest.fixture
def root_only() -> None:
    if os.geteuid() != 0:
        pytest.fail("reading overlay2 storage needs root; CI runs the suite as root")


def _tar_members(image: str, read: str) -> tuple[dict[str, Member], str]:
    source = DockerSource(image, read=read)
    with source.rootfs_tar() as stream:
        members = members_of_tar(stream)
    return members, source.read_by


#: Written by the engine when it creates the container that is read (its init layer and
#: the missing WORKDIR): their mtimes are those of that container, seconds apart between
#: two reads.
_CREATED_PER_CONTAINER = {"", ".dockerenv", "dev", "dev/console", "dev/pts", "dev/shm", "etc",
                          "etc/hostname", "etc/hosts", "etc/mtab", "etc/resolv.conf", "proc",
                          "sys", "workspace", "workspace/not-in-the-image", "data"}


def test_storage_tar_is_the_export_tar(layered_image: str, root_only: None) -> None:
    """Member for member, in the same order: names, types, modes, owners, link targets,
    contents, xattrs; mtimes too, except those of what the engine makes per container."""
    from_storage, read_by = _tar_members(layered_image, "storage")
    from_export, export_read_by = _tar_members(layered_image, "export")
    assert read_by.startswith("overlay2 storage, ") and export_read_by == "docker export"
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
    # docker export carries security.capability only (moby pkg/archive), and so does this
    assert members["opt/t/suid"].xattrs == {"security.capability": bytes.fromhex(CAPABILITY)}
    assert members["opt/user-xattr"].xattrs == {}
    assert members["opt/t/fifo"].type == "fifo"
    assert members["opt/t/old-stamp"].mtime == 1_500_000_000
    assert "opt/t/new\nline" in members and f"opt/t/{LONG}/f" in members
    assert members["etc/mtab"].linkname == "/proc/mounts"  # the init layer's, as exported


def test_same_squashfs_bytes_from_storage_and_export(layered_image: str, root_only: None,
                                                     tmp_path: Path) -> None:
    from_storage = squash_image(DockerSource(layered_image, read="storage"),
                                tmp_path / "storage.sqsh")
    from_export = squash_image(DockerSource(layered_image, read="export"),
                               tmp_path / "export.sqsh")
    assert from_storage.artifact.sha256 == from_export.artifact.sha256
    members = read_squashfs(from_storage.artifact.path)
    assert members["opt/t/suid"].xattrs == {"security.capability": bytes.fromhex(CAPABILITY)}
    assert members["opt/t/opaque/new"].data == b"new\n"


def _mounts() -> str:
    return Path("/proc/self/mountinfo").read_text()


def test_nothing_stays_mounted_or_created(docker_engine, layered_image: str, root_only: None,  # type: ignore[no-untyped-def]
                                          tmp_path: Path) -> None:
    """The overlay lives in a private mount namespace: not in ours, even when the reader is
    stopped in the middle; the export container and the mount point are gone."""
    mounts, tmp = _mounts(), set(Path(tempfile.gettempdir()).glob("imagebuild-read-*"))
    containers = {c.id for c in docker_engine.client.containers.list(all=True)}
    source = DockerSource(layered_image, read="storage")
    with pytest.raises(KeyboardInterrupt), source.rootfs_tar() as stream:
        stream.read(1 << 16)
        assert "imagebuild-storage-read" not in _mounts()
        raise KeyboardInterrupt
    assert _mounts() == mounts
    assert set(Path(tempfile.gettempdir()).glob("imagebuild-read-*")) == tmp
    assert {c.id for c in docker_engine.client.containers.list(all=True)} == containers
    assert not subprocess.run(["pgrep", "-f", "imagebuild-storage-read"],
                              capture_output=True, check=False).stdout


def test_cli_says_how_it_read(layered_image: str, root_only: None, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    for read, said in (("storage", "read: overlay2 storage, "), ("export", "read: docker export")):
        code = cli.main(["-C", str(tmp_path), "squash", layered_image, "--formats", "sqsh",
                         "--backend", "docker", "--read", read,
                         "--output-dir", str(tmp_path / read)])
        assert code == 0
        assert said in capsys.readouterr().out
    digests = {(tmp_path / r / "imagebuild-test+squash+layered.sqsh.sha256").read_text().split()[0]
               for r in ("storage", "export")}
    assert len(digests) == 1


def test_a_refused_mount_falls_back_to_export(layered_image: str, root_only: None) -> None:
    """auto reads through the engine when the kernel or a sandbox refuses the mount;
    storage says why and what to do."""

    class RefusingRunner(CommandRunner):
        """Runs everything as usual, but the mount probe meets a refusing kernel."""

        def capture(self, argv, **kwargs):  # type: ignore[no-untyped-def]
            if "unshare" in argv:
                argv = ["sh", "-c", "echo 'mount: permission denied' >&2; exit 32"]
            return super().capture(argv, **kwargs)

    auto = DockerSource(layered_image, read="auto", runner=RefusingRunner())  # type: ignore[arg-type]
    with auto.rootfs_tar() as stream:
        assert stream.read(512)
    assert auto.read_by == "docker export"
    forced = DockerSource(layered_image, read="storage", runner=RefusingRunner())  # type: ignore[arg-type]
    with pytest.raises(EngineError) as caught, forced.rootfs_tar():
        pass
    assert "the overlay mount failed: mount: permission denied" in str(caught.value)
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
])
def test_why_storage_cannot_be_read(tmp_path: Path, graph: str, euid: int, said: str) -> None:
    data = _graph(tmp_path, 200 if graph == "too-many" else 2,
                  name="vfs" if graph == "vfs" else "overlay2")
    if graph == "missing-link":
        (tmp_path / "layer1" / "link").unlink()
    with pytest.raises(storage.StorageUnavailable, match=re.escape(said)):
        storage.overlay_layers(data, euid=euid)
