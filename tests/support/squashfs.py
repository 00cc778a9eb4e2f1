"""Reading squashfs and SIF artifacts back in tests, with the real tools.

``read_squashfs`` turns an image into ``{path: Member}`` through ``sqfs2tar`` (squashfs-tools-ng),
so a test compares ownership, modes (setuid/setgid/sticky), link targets, hard links, xattrs
and contents with what went in. ``sif_objects`` and ``sif_partition`` read a .sif through
``siftool``.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Member:
    path: str
    type: str  # "file" | "dir" | "symlink" | "hardlink" | "char" | "block" | "fifo"
    mode: int  # permission bits incl. setuid/setgid/sticky
    uid: int
    gid: int
    mtime: int
    linkname: str = ""
    sha256: str = ""
    size: int = 0
    data: bytes = b""  # for small files (<= 64 KiB)
    xattrs: dict[str, bytes] = field(default_factory=dict)


_TYPES = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir",
          tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char",
          tarfile.BLKTYPE: "block", tarfile.FIFOTYPE: "fifo"}


def members_of_tar(stream: io.BufferedIOBase | io.RawIOBase) -> dict[str, Member]:
    out: dict[str, Member] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for info in tar:
            name = info.name.removeprefix("./").strip("/")
            name = "" if name == "." else name
            data = b""
            digest = ""
            if info.isreg():
                body = tar.extractfile(info)
                assert body is not None
                content = body.read()
                digest = hashlib.sha256(content).hexdigest()
                data = content if len(content) <= 65536 else b""
            xattrs = {k.removeprefix("SCHILY.xattr."): v.encode("utf-8", "surrogateescape")
                      for k, v in info.pax_headers.items() if k.startswith("SCHILY.xattr.")}
            linkname = info.linkname
            if info.islnk():
                linkname = linkname.removeprefix("./").strip("/")
            out[name] = Member(name, _TYPES.get(info.type, repr(info.type)), info.mode & 0o7777,
                               info.uid, info.gid, int(info.mtime), linkname, digest, info.size,
                               data, xattrs)
    return out


def read_squashfs(path: Path) -> dict[str, Member]:
    """Every inode of a squashfs as a Member keyed by its path ("" is the root)."""
    proc = subprocess.Popen(["sqfs2tar", "--root-becomes", ".", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    members = members_of_tar(proc.stdout)
    _, err = proc.communicate()
    assert proc.returncode == 0, f"sqfs2tar {path}: {err.decode(errors='replace')}"
    return members


def hardlink_groups(members: dict[str, Member]) -> set[frozenset[str]]:
    """Sets of paths that are one inode (a file and the hard links naming it)."""
    groups: dict[str, set[str]] = {}
    for member in members.values():
        if member.type == "hardlink":
            groups.setdefault(member.linkname, {member.linkname}).add(member.path)
    return {frozenset(g) for g in groups.values()}


def cat(path: Path, inner: str) -> bytes:
    """One file's bytes from a squashfs (rdsquashfs --cat)."""
    return subprocess.run(["rdsquashfs", "--cat", inner, str(path)], check=True,
                          capture_output=True).stdout


def unsquashfs_listing(path: Path) -> dict[str, str]:
    """``unsquashfs -lln``: path -> "mode-string uid/gid" (a second, independent reader)."""
    out = subprocess.run(["unsquashfs", "-lln", str(path)], check=True, capture_output=True,
                         text=True).stdout
    listing = {}
    for line in out.splitlines():
        match = re.match(r"^(\S+) (\d+)/(\d+)\s+\S+ \S+ \S+ squashfs-root/?(.*?)(?: -> .*)?$",
                         line)
        if match:
            listing[match.group(4)] = f"{match.group(1)} {match.group(2)}/{match.group(3)}"
    return listing


def sif_objects(path: Path) -> list[dict[str, str]]:
    """``siftool list`` rows: id, group, link, position, type."""
    out = subprocess.run(["siftool", "list", str(path)], check=True, capture_output=True,
                         text=True).stdout
    rows = []
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 5 and cells[0].isdigit():
            rows.append(dict(zip(("id", "group", "link", "position", "type"), cells,
                                 strict=True)))
    return rows


def sif_object(path: Path, object_id: int) -> bytes:
    return subprocess.run(["siftool", "dump", str(object_id), str(path)], check=True,
                          capture_output=True).stdout
