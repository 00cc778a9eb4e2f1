"""The rootfs tar stream as a site runtime should see it: engine-only members dropped, the
runtime's own files injected, mtimes clamped for reproducibility; streamed end to end."""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, BinaryIO, Protocol

from imagebuild.convert.tarstream import (
    BLOCK,
    ENCODING,
    ERRORS,
    ZERO_BLOCK,
    Reader,
    padded,
    read_member,
    with_mtime,
)

#: Written by the engine into every exported container, meaningless elsewhere. enroot drops
#: the same (src/docker.sh: ``tar --exclude='dev/*' --exclude='.dockerenv'``); podman's
#: marker is /run/.containerenv.
_DROP_EXACT = frozenset({".dockerenv", "run/.containerenv"})
_DROP_UNDER = ("dev/",)
#: The build host's network identity, written as empty files whatever the image holds.
#: Runtimes bind the running host's over them (docker and podman; enroot's
#: conf/mounts/10-system.fstab all three; Apptainer's apptainer.conf /etc/hosts and
#: resolv_conf), so their content is never meant to be seen. Docker exports them empty (its
#: init layer creates them as mount points); a podman-built image can carry the build
#: host's name and private nameserver addresses. Empty files make both engines' output the
#: same and leak nothing.
HOST_FILES = ("etc/hostname", "etc/hosts", "etc/resolv.conf")


@dataclass(frozen=True)
class RootfsEntry:
    """A file, directory or symlink to place into the root filesystem stream.

    A file or symlink replaces any member of the same path; a directory keeps the image's
    own metadata if the image has it, and is created otherwise.
    """

    path: str  # relative, no leading "/" (e.g. "etc/rc")
    kind: str = "file"  # "file" | "dir" | "symlink"
    data: bytes = b""
    mode: int = 0o644
    target: str = ""  # symlink target

    def tarinfo(self, mtime: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(self.path)
        info.mtime = mtime
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if self.kind == "dir":
            info.type, info.mode = tarfile.DIRTYPE, self.mode
        elif self.kind == "symlink":
            info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, self.target
        else:
            info.type, info.mode, info.size = tarfile.REGTYPE, self.mode, len(self.data)
        return info


class StreamObserver(Protocol):
    """Sees every member the filter writes (sizes, dpkg's database: imagebuild.convert.scan)
    and adds files after the image's own, made from what it saw (the SBOM)."""

    #: Paths the observer writes at the end; a member of the image at one of them is dropped.
    injects: frozenset[str]

    def wants(self, name: str) -> bool:
        """Whether ``member`` gets the content of the regular file ``name`` (small files)."""

    def member(self, name: str, info: tarfile.TarInfo, data: bytes | None) -> None: ...

    def entries(self) -> Iterable[RootfsEntry]:
        """Called once, after the image's members: the files to add."""


@dataclass(frozen=True)
class StreamStats:
    members: int
    bytes_in: int  # file content bytes read from the image
    dropped: tuple[str, ...]
    replaced: tuple[str, ...]


def _normalize(name: str) -> str:
    while name.startswith("./"):
        name = name[2:]
    return name.strip("/") if name not in (".", "./", "/") else ""


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def filter_rootfs_tar(
    src: BinaryIO,
    dst: IO[bytes],
    entries: Iterable[RootfsEntry] = (),
    clamp_mtime: int | None = None,
    keep_root_entry: bool = True,
    observer: StreamObserver | None = None,
) -> StreamStats:
    """Copy a rootfs tar stream from ``src`` to ``dst``, injecting ``entries``.

    Both sides stream: small members go through a read-ahead buffer, large bodies are
    spliced or copied in chunks, never held whole, so memory stays flat for a 30 GB image. Members pass as the bytes they came as
    (owner, mode incl. setuid/setgid, symlink and hard-link targets, PAX xattrs), except:
    engine-only members are dropped, entries replace members of the same path, the
    ``HOST_FILES`` become empty files (unless ``entries`` give them), and mtimes later than
    ``clamp_mtime`` are clamped to it (the files a build writes carry its wall time, those
    the engine creates at container creation the export's; clamping to the lock's
    SOURCE_DATE_EPOCH makes the output reproducible while keeping the older mtimes of
    pinned inputs, which timestamp-based .pyc files are validated against), and injected
    entries get ``clamp_mtime``. A clamped ustar mtime is patched in its header block; a
    member whose name needs normalizing or whose PAX records carry a later mtime is
    re-encoded by tarfile. Headers are parsed here rather than by tarfile, which re-encoded
    every member: 2.4 s of the 870 MiB benchmark image's stream on one core, against a
    fraction of that now (benchmarks/squash_bench.py).
    """
    wanted = {path: RootfsEntry(path) for path in HOST_FILES}
    wanted.update((e.path, e) for e in entries)
    files = {p: e for p, e in wanted.items() if e.kind != "dir"}
    if observer is not None:
        files.update((p, RootfsEntry(p)) for p in observer.injects)
    seen: set[str] = set()
    dropped: list[str] = []
    replaced: list[str] = []
    members = 0
    bytes_in = 0
    default_mtime = clamp_mtime if clamp_mtime is not None else 0
    reader = Reader(src, dst)

    def add(info: tarfile.TarInfo, data: bytes = b"") -> None:
        dst.write(info.tobuf(tarfile.PAX_FORMAT, ENCODING, ERRORS))
        if data:
            dst.write(data)
            dst.write(bytes(padded(len(data)) - len(data)))

    handed_over = False
    try:
        while (member := read_member(reader, dst)) is not None:
            name = _normalize(member.name)
            body = member.size if member.type in tarfile.REGULAR_TYPES else 0
            padding = padded(body)
            if name in _DROP_EXACT or name.startswith(_DROP_UNDER) or name in files or (
                    member.type == tarfile.LNKTYPE
                    and _normalize(member.linkname).startswith(_DROP_UNDER)):
                reader.copy(padding, None)
                if name in files:
                    replaced.append(name)
                else:
                    dropped.append(name)
                continue
            if member.type == tarfile.LNKTYPE and _normalize(member.linkname) in files:
                # A hard link to a replaced file: give the link path the new content (as a
                # copy: the replacement is written at the end, after this link).
                reader.copy(padding, None)
                entry = files[_normalize(member.linkname)]
                copy = RootfsEntry(name, entry.kind, entry.data, entry.mode, entry.target)
                add(copy.tarinfo(default_mtime), entry.data)
                replaced.append(name)
                seen.add(name)
                continue
            if name == "" and not keep_root_entry:
                reader.copy(padding, None)
                continue
            stored = "./" if name == "" else name
            clamp = clamp_mtime is not None and member.mtime > clamp_mtime
            renamed = member.name.rstrip("/") != stored.rstrip("/") or (
                member.type == tarfile.LNKTYPE and _normalize(member.linkname) != member.linkname)
            seen.add(name)
            members += 1
            bytes_in += body
            reencode = renamed or (clamp and "mtime" in member.pax)
            info = None
            if observer is not None or reencode:
                # The member as it is written: normalized names, clamped mtime.
                info = member.tarinfo()
                info.name = stored
                if member.type == tarfile.LNKTYPE:
                    info.linkname = _normalize(member.linkname)
                if clamp:
                    assert clamp_mtime is not None  # clamp implies it
                    info.mtime = clamp_mtime
            data = None
            if observer is not None:
                assert info is not None
                if body and observer.wants(name):
                    data = reader.read(padding)[:body]
                observer.member(name, info, data)
            if reencode:
                assert info is not None
                dst.write(info.tobuf(tarfile.PAX_FORMAT, ENCODING, ERRORS))
            elif clamp:
                assert clamp_mtime is not None
                dst.write(member.blocks[:-BLOCK] + with_mtime(member.header, clamp_mtime))
            else:
                dst.write(member.blocks)
            if data is not None:
                dst.write(data + bytes(padding - body))
            else:
                reader.copy(padding, dst)
        if observer is not None:
            wanted.update((e.path, e) for e in observer.entries())
        for path in sorted(wanted):
            entry = wanted[path]
            if entry.kind == "dir" and path in seen:
                continue
            for parent in _parents(path):
                if parent not in seen:
                    add(RootfsEntry(parent, "dir", mode=0o755).tarinfo(default_mtime))
                    seen.add(parent)
            add(entry.tarinfo(default_mtime), entry.data if entry.kind == "file" else b"")
            seen.add(path)
            members += 1
        handed_over = True
        dst.write(ZERO_BLOCK * 2)  # the end-of-archive marker
        dst.flush()
    except BrokenPipeError:
        if not handed_over:
            raise
        # A reader may stop at the end-of-archive marker and exit (mksquashfs -tar does):
        # every member was handed over, and the tool's exit status says if it read them all.
    return StreamStats(members=members, bytes_in=bytes_in, dropped=tuple(dropped),
                       replaced=tuple(replaced))
