"""Are two artifacts of one recipe the same bytes, and if not, which files differ and how.

Two squashfs images are compared by sha256 first; when they differ, each is read back as a
tar stream (``sqfs2tar``, squashfs-tools-ng) and compared member by member: type, content
(sha256), mode, owner, mtime, link target and xattrs. The differences come back sorted by
path, so a report names the first differing files and what differs in each.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from imagebuild.errors import SquashError
from imagebuild.files import sha256_file

_CHUNK = 1 << 20
_TYPES = {tarfile.REGTYPE: "file", tarfile.AREGTYPE: "file", tarfile.DIRTYPE: "dir",
          tarfile.SYMTYPE: "symlink", tarfile.LNKTYPE: "hardlink", tarfile.CHRTYPE: "char",
          tarfile.BLKTYPE: "block", tarfile.FIFOTYPE: "fifo"}


@dataclass(frozen=True)
class Entry:
    """What a tar member says about one path (content as a digest)."""

    kind: str
    mode: int
    owner: tuple[int, int]
    mtime: int
    size: int
    sha256: str
    linkname: str
    xattrs: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Difference:
    path: str
    #: What differs, e.g. ("content", "mtime 1700000000 != 1700000050"), or ("only in a",).
    what: tuple[str, ...]

    def __str__(self) -> str:
        return f"/{self.path}: {', '.join(self.what)}"


@dataclass(frozen=True)
class Comparison:
    a: Path
    b: Path
    sha256_a: str
    sha256_b: str
    #: Sorted by path; empty when the files are identical.
    differences: tuple[Difference, ...] = ()
    paths: int = 0

    @property
    def identical(self) -> bool:
        return self.sha256_a == self.sha256_b

    def summary(self) -> str:
        """``content 12, mtime 3000`` : how many paths differ in each respect."""
        counts = Counter(w.split(" ", 1)[0] for d in self.differences for w in d.what)
        return ", ".join(f"{key} {n}" for key, n in sorted(counts.items()))


def _normalize(name: str) -> str:
    name = name.removeprefix("./").strip("/")
    return "" if name == "." else name


def tar_entries(stream: IO[bytes]) -> dict[str, Entry]:
    """Every member of a tar stream by normalized path ("" is the root)."""
    out: dict[str, Entry] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for info in tar:
            digest = ""
            if info.isreg():
                body = tar.extractfile(info)
                assert body is not None
                sha = hashlib.sha256()
                while chunk := body.read(_CHUNK):
                    sha.update(chunk)
                digest = sha.hexdigest()
            xattrs = tuple(sorted((k, v) for k, v in info.pax_headers.items()
                                  if k.startswith("SCHILY.xattr.")))
            linkname = _normalize(info.linkname) if info.islnk() else info.linkname
            out[_normalize(info.name)] = Entry(
                _TYPES.get(info.type, repr(info.type)), info.mode & 0o7777,
                (info.uid, info.gid), int(info.mtime), info.size, digest, linkname, xattrs)
    return out


def squashfs_entries(path: Path, sqfs2tar: str | None = None) -> dict[str, Entry]:
    """A squashfs image's inodes as tar members, through ``sqfs2tar``."""
    tool = sqfs2tar or shutil.which("sqfs2tar")
    if tool is None:
        raise SquashError("comparing squashfs images needs sqfs2tar (squashfs-tools-ng)")
    proc = subprocess.Popen([tool, "--root-becomes", ".", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    try:
        entries = tar_entries(proc.stdout)
    finally:
        _, err = proc.communicate()
    if proc.returncode != 0:
        raise SquashError(f"sqfs2tar {path}: {err.decode(errors='replace').strip()}")
    return entries


def _what_differs(a: Entry, b: Entry) -> tuple[str, ...]:
    what = []
    if a.kind != b.kind:
        what.append(f"type {a.kind} != {b.kind}")
    if a.sha256 != b.sha256 or a.size != b.size:
        what.append("content")
    if a.mode != b.mode:
        what.append(f"mode {a.mode:04o} != {b.mode:04o}")
    if a.owner != b.owner:
        what.append(f"owner {a.owner[0]}:{a.owner[1]} != {b.owner[0]}:{b.owner[1]}")
    if a.mtime != b.mtime:
        what.append(f"mtime {a.mtime} != {b.mtime}")
    if a.linkname != b.linkname:
        what.append(f"link {a.linkname!r} != {b.linkname!r}")
    if a.xattrs != b.xattrs:
        what.append("xattrs")
    return tuple(what)


def compare_entries(a: dict[str, Entry], b: dict[str, Entry]) -> list[Difference]:
    out = []
    for path in sorted(a.keys() | b.keys()):
        if path not in b:
            out.append(Difference(path, ("only in a",)))
        elif path not in a:
            out.append(Difference(path, ("only in b",)))
        elif what := _what_differs(a[path], b[path]):
            out.append(Difference(path, what))
    return out


def compare_squashfs(a: Path, b: Path) -> Comparison:
    """sha256 of both; the member differences only when those differ."""
    sha_a, sha_b = sha256_file(a), sha256_file(b)
    if sha_a == sha_b:
        return Comparison(a, b, sha_a, sha_b)
    entries_a, entries_b = squashfs_entries(a), squashfs_entries(b)
    return Comparison(a, b, sha_a, sha_b, tuple(compare_entries(entries_a, entries_b)),
                      len(entries_a.keys() | entries_b.keys()))


def report_lines(comparison: Comparison, limit: int = 20) -> Iterable[str]:
    """The verdict, then the first ``limit`` differing paths (sorted) with what differs."""
    c = comparison
    if c.identical:
        yield f"reproducible: {c.a.name} and {c.b.name} are identical (sha256:{c.sha256_a})"
        return
    if c.a.suffix != ".sqsh":
        yield f"NOT reproducible: {c.a.name} sha256:{c.sha256_a} != {c.b.name} sha256:{c.sha256_b}"
        return
    yield (f"NOT reproducible: sha256:{c.sha256_a[:16]} ({c.a}) != "
           f"sha256:{c.sha256_b[:16]} ({c.b})")
    if not c.differences:
        yield "  every file and its metadata agree: the squashfs layout itself differs"
        return
    yield f"  {len(c.differences)} of {c.paths} paths differ ({c.summary()}); first ones:"
    for difference in c.differences[:limit]:
        yield f"  {difference}"
