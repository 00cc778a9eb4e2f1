"""Fixtures for the squash/SIF/EDF tests: a crafted rootfs tar with every kind of metadata
that must survive, and the real squashfs tools (CI installs them; see .ci/setup-system.sh)."""

from __future__ import annotations

import functools
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagebuild.convert.sources import ImageConfig
from imagebuild.convert.squashfs import SquashTool, find_squash_tool
from tests.support.engine_env import (  # noqa: F401  (pytest fixtures)
    base_image,
    docker_engine,
    podman_base_image,
    podman_engine,
)

MTIME = 1_600_000_000
#: A file capability (cap_net_raw+ep, VFS_CAP_REVISION_2) with bytes above 0x7f, which
#: must survive tar PAX encoding byte for byte.
CAPABILITY = bytes.fromhex("01000002" "00200000" "00000000" "ff000000" "00000000")
BIG = bytes(range(256)) * 1200  # 300 KiB: spans data blocks and a tail fragment


@dataclass(frozen=True)
class Crafted:
    path: Path
    #: name -> (type, mode, uid, gid, linkname, content, xattrs)
    expected: dict[str, tuple]


def add_member(tar: tarfile.TarFile, expected: dict, name: str, kind: str = "file",
         data: bytes = b"", mode: int = 0o644, uid: int = 0, gid: int = 0, link: str = "",
         xattrs: dict[str, bytes] | None = None, mtime: int = MTIME) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.uid, info.gid, info.mtime = mode, uid, gid, mtime
    info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                 "hardlink": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE,
                 "char": tarfile.CHRTYPE}[kind]
    if kind in ("symlink", "hardlink"):
        info.linkname = link
    if kind == "char":
        info.devmajor, info.devminor = 1, 3
    if kind == "file":
        info.size = len(data)
    if xattrs:
        info.pax_headers = {f"SCHILY.xattr.{k}": v.decode("utf-8", "surrogateescape")
                            for k, v in xattrs.items()}
    tar.addfile(info, io.BytesIO(data) if kind == "file" else None)
    expected[name] = (kind, mode, uid, gid, link, data, xattrs or {})


def craft_rootfs(path: Path) -> Crafted:
    """A small rootfs in docker-export style (relative names, no root entry)."""
    expected: dict[str, tuple] = {}
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        add = functools.partial(add_member, tar, expected)
        add("bin", "dir", mode=0o755)
        add("bin/sh-ish", data=b"#!/bin/sh\necho hi\n", mode=0o755)
        add("bin/su", data=b"\x7fELF fake setuid binary", mode=0o4755)
        add("bin/wall", data=b"\x7fELF fake setgid binary", mode=0o2755, gid=5)
        add("bin/ping", data=b"\x7fELF fake ping", mode=0o755,
            xattrs={"security.capability": CAPABILITY, "user.origin": b"imagebuild test"})
        add("bin/su-again", "hardlink", mode=0o4755, link="bin/su")
        add("bin/sh", "symlink", mode=0o777, link="sh-ish")
        add("etc", "dir", mode=0o755)
        add("etc/environment", data=b"IMAGE_OWN=1\n")
        add("etc/shadow", data=b"root:*:19000:0:99999:7:::\n", mode=0o640, gid=42)
        add("etc/mtab", "symlink", mode=0o777, link="/proc/mounts")
        add("home", "dir", mode=0o755)
        add("home/user", "dir", mode=0o700, uid=1000, gid=1000)
        add("home/user/data.bin", data=BIG, mode=0o600, uid=1000, gid=1000)
        add("home/user/empty", data=b"", mode=0o644, uid=1000, gid=1000)
        add("home/user/" + "long-name-" * 12 + "end", data=b"long", uid=1000, gid=1000)
        add("home/user/ünïcödé.txt", data="grüße\n".encode(), uid=1000, gid=1000)
        add("tmp", "dir", mode=0o1777)
        add("run", "dir", mode=0o755)
        add("run/fifo", "fifo", mode=0o600)
        add("dev", "dir", mode=0o755)
        add("dev/null", "char", mode=0o666)  # engine-made: must be dropped
        add(".dockerenv", data=b"", mode=0o755)  # engine-made: must be dropped
        add("opt", "dir", mode=0o755)
        add("opt/old", data=b"from the past", mtime=1_000)
        add("opt/new", data=b"stamped at export", mtime=2_000_000_000)
    return Crafted(path, expected)


@pytest.fixture
def crafted(tmp_path: Path) -> Crafted:
    return craft_rootfs(tmp_path / "rootfs.tar")


CONFIG = ImageConfig(
    env=("PATH=/usr/local/bin:/usr/bin:/bin", "GREETING=hello world", 'TRICKY=a"b$c`d\\e',
         "EMPTY="),
    workdir="/workspace/run",
    entrypoint=("/bin/entry", "--flag"),
    cmd=("train.py", "it's"),
    labels=(("org.opencontainers.image.title", "test image"), ("rocm", "7.0.2")),
    volumes=("/data", "/scratch"),
    created=1_700_000_000,
    raw={"Env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "Cmd": ["train.py"]},
)


@pytest.fixture(params=["tar2sqfs", "mksquashfs"])
def squash_tool(request: pytest.FixtureRequest) -> SquashTool:
    """Each squashfs writer; both are installed in CI (squashfs-tools-ng, squashfs-tools)."""
    return find_squash_tool(request.param)
