"""The rootfs tar stream as a site runtime should see it: engine-only members dropped, the
runtime's own files injected, mtimes clamped for reproducibility; streamed end to end."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any, BinaryIO, Protocol

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


_BLOCK = 512
_ZERO_BLOCK = bytes(_BLOCK)
_ENCODING, _ERRORS = "utf-8", "surrogateescape"
#: Header types that describe the next member instead of being one: PAX per-member records,
#: GNU long name and long link name.
_EXTENSIONS = (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_TYPES = {tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.LNKTYPE, tarfile.SYMTYPE, tarfile.CHRTYPE,
          tarfile.BLKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE}


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode(_ENCODING, _ERRORS)


def _pax_records(data: bytes) -> dict[str, str]:
    """POSIX pax extended header records: "<length> <key>=<value>\\n" each."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        key, _, value = data[space + 1:pos + length - 1].partition(b"=")
        records[key.decode(_ENCODING, _ERRORS)] = value.decode(_ENCODING, _ERRORS)
        pos += length
    return records


def _pipe_fd(stream: object) -> int | None:
    """The descriptor of an unbuffered pipe (nothing read ahead of us), else None."""
    if not isinstance(stream, io.FileIO) and not callable(getattr(stream, "splice_from", None)):
        return None
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        return fd if stat.S_ISFIFO(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, io.UnsupportedOperation):
        return None


#: Reads from the source and writes to the tool go in chunks of this size: a member's
#: header and a small file's body cost no system call of their own (a ROCm image is mostly
#: small files: 27,000 in the 1 GiB demo image).
_CHUNK = 256 << 10
#: A body still this long after what the read-ahead holds moves with splice(2) instead.
_SPLICE_MIN = 64 << 10


class PipeWriter:
    """The squashfs tool's stdin: headers and small bodies gather in a buffer written in
    ``_CHUNK``s; large bodies from a source pipe move in the kernel (splice(2)) without
    passing through Python. ``count`` is what went in, either way."""

    def __init__(self, pipe: IO[bytes]):
        self._fd = pipe.fileno()
        self._pending = bytearray()
        self.count = 0

    def fileno(self) -> int:
        return self._fd

    def write(self, data: Any) -> int:
        self._pending += data
        if len(self._pending) >= _CHUNK:
            self.flush()
        return len(data)

    def flush(self) -> None:
        view = memoryview(self._pending)
        written = 0
        try:
            while written < len(view):
                written += os.write(self._fd, view[written:])
        finally:
            view.release()
            del self._pending[:written]
            self.count += written

    def splice_from(self, fd: int, size: int) -> None:
        self.flush()
        while size > 0:
            moved = os.splice(fd, self._fd, size)
            if not moved:
                raise tarfile.ReadError("unexpected end of the tar stream")
            size -= moved
            self.count += moved


class _Reader:
    """Exact reads from the source through a read-ahead buffer, and body copies: the large
    ones spliced from pipe to pipe where both ends allow it, the rest through the buffer."""

    def __init__(self, raw: BinaryIO, dst: IO[bytes]):
        self._raw = raw
        spliceable = hasattr(os, "splice") and _pipe_fd(dst) is not None
        self._fd = _pipe_fd(raw) if spliceable else None
        self._splice_to = dst if self._fd is not None else None
        self._buffer = bytearray()
        self._pos = 0
        self._scratch = bytearray(_CHUNK)

    def _fill(self, size: int) -> int:
        """Hold at least ``size`` unread bytes if the stream has them; how many it holds."""
        held = len(self._buffer) - self._pos
        if held >= size:
            return held
        if self._pos:
            del self._buffer[:self._pos]
            self._pos = 0
        readinto = getattr(self._raw, "readinto", None)
        while held < size:
            if readinto is not None:
                got = readinto(self._scratch) or 0
                self._buffer += memoryview(self._scratch)[:got]
            else:
                chunk = self._raw.read(_CHUNK)
                got = len(chunk)
                self._buffer += chunk
            if not got:
                break
            held += got
        return held

    def _take(self, size: int) -> memoryview:
        """Up to ``size`` buffered bytes (valid until the next read)."""
        size = min(size, len(self._buffer) - self._pos)
        view = memoryview(self._buffer)[self._pos:self._pos + size]
        self._pos += size
        return view

    def block(self) -> bytes:
        """The next 512-byte block, or b"" where the stream ends (an archive without its
        end-of-archive marker, as a cut export looks: reported by the caller)."""
        held = self._fill(_BLOCK)
        if not held:
            return b""
        if held < _BLOCK:
            raise tarfile.ReadError("unexpected end of the tar stream")
        with self._take(_BLOCK) as view:
            return bytes(view)

    def read(self, size: int) -> bytes:
        if self._fill(size) < size:
            raise tarfile.ReadError("unexpected end of the tar stream")
        with self._take(size) as view:
            return bytes(view)

    def copy(self, size: int, dst: IO[bytes] | None) -> None:
        """Move ``size`` bytes to ``dst`` (None: skip them) without a bytes object each."""
        while size > 0:
            if self._pos < len(self._buffer):
                with self._take(size) as view:
                    if dst is not None:
                        dst.write(view)
                    size -= len(view)
            elif size >= _SPLICE_MIN and dst is not None and dst is self._splice_to:
                dst.splice_from(self._fd, size)  # type: ignore[attr-defined]
                return
            elif not self._fill(min(size, _CHUNK)):
                raise tarfile.ReadError("unexpected end of the tar stream")


@dataclass
class _Member:
    """One member as read: its raw blocks (extension headers and its own) and what the filter
    decides on. Bodies are not read here."""

    blocks: bytes  # extension headers with their data, then the member's header block
    header: bytes  # the member's own header block
    name: str  # as stored, before normalizing
    linkname: str
    type: bytes
    size: int
    mtime: int
    pax: dict[str, str]

    def tarinfo(self) -> tarfile.TarInfo:
        """The member as tarfile sees it, for re-encoding and for observers."""
        header = self.header
        # tarfile.nti, calc_chksums and InvalidHeaderError are private (absent from the type
        # stubs) but stable since Python 3.2: reused here rather than re-implemented.
        info = tarfile.TarInfo(self.name)
        info.type, info.size, info.mtime = self.type, self.size, self.mtime
        info.linkname = self.linkname
        info.mode = tarfile.nti(header[100:108])  # type: ignore[attr-defined]
        info.uid = (int(self.pax["uid"]) if "uid" in self.pax
                    else tarfile.nti(header[108:116]))  # type: ignore[attr-defined]
        info.gid = (int(self.pax["gid"]) if "gid" in self.pax
                    else tarfile.nti(header[116:124]))  # type: ignore[attr-defined]
        info.uname = self.pax.get("uname", _text(header[265:297]))
        info.gname = self.pax.get("gname", _text(header[297:329]))
        if self.type in (tarfile.CHRTYPE, tarfile.BLKTYPE):
            info.devmajor = tarfile.nti(header[329:337])  # type: ignore[attr-defined]
            info.devminor = tarfile.nti(header[337:345])  # type: ignore[attr-defined]
        info.pax_headers = {k: v for k, v in self.pax.items()
                            if k not in ("path", "linkpath", "size", "mtime", "uid", "gid",
                                         "uname", "gname")}
        return info


#: The checksum field read as spaces, for the unsigned sum (POSIX ustar).
_CHKSUM_AS_SPACES = 8 * 0x20


def _checksum_ok(header: bytes) -> bool:
    """The header's checksum against the sum of its bytes: one C-level sum per header (tarfile
    unpacks the block twice); the signed sum some old tars wrote only when that fails."""
    recorded = _number(header[148:156])
    if recorded == sum(header) - sum(header[148:156]) + _CHKSUM_AS_SPACES:
        return True
    return recorded in tarfile.calc_chksums(header)  # type: ignore[attr-defined]


def _number(field: bytes) -> int:
    """A numeric header field: octal text, or GNU's base-256 (first byte 0x80/0xff)."""
    if field[0] & 0x80:
        return tarfile.nti(field)  # type: ignore[attr-defined]
    digits = field.split(b"\0", 1)[0].strip()
    try:
        return int(digits, 8) if digits else 0
    except ValueError:
        raise tarfile.InvalidHeaderError(  # type: ignore[attr-defined]
            "invalid number in a tar header") from None


def _read_member(reader: _Reader, dst: IO[bytes]) -> _Member | None:
    """The next member, or None at the end of the archive. PAX global headers pass through."""
    extensions: list[bytes] = []
    pax: dict[str, str] = {}
    longname = longlink = None
    while True:
        header = reader.block()
        if not header:
            if extensions:
                raise tarfile.ReadError("the tar stream ends inside a member's headers")
            return None
        if header == _ZERO_BLOCK:
            return None
        if not _checksum_ok(header):
            raise tarfile.ReadError("bad checksum in a tar header")
        kind = header[156:157]
        size = _number(header[124:136])
        if kind in _EXTENSIONS or kind == tarfile.XGLTYPE:
            data = reader.read(_padded(size))
            if kind == tarfile.XGLTYPE:
                dst.write(header + data)  # applies to what follows: keep it in place
                continue
            extensions.append(header + data)
            if kind == tarfile.XHDTYPE:
                pax.update(_pax_records(data[:size]))
            elif kind == tarfile.GNUTYPE_LONGNAME:
                longname = _text(data[:size])
            else:
                longlink = _text(data[:size])
            continue
        name = _text(header[0:100])
        if header[257:265] == b"ustar\x0000" and header[345]:
            name = _text(header[345:500]) + "/" + name
        name = pax.get("path", longname if longname is not None else name)
        linkname = pax.get("linkpath",
                           longlink if longlink is not None else _text(header[157:257]))
        size = int(pax["size"]) if "size" in pax else size
        mtime = _number(header[136:148])
        if "mtime" in pax:
            mtime = int(float(pax["mtime"]))
        if kind == tarfile.AREGTYPE and name.endswith("/"):
            kind = tarfile.DIRTYPE  # pre-POSIX tar marked directories by the slash alone
        return _Member(b"".join(extensions) + header, header, name, linkname,
                       kind if kind in _TYPES else tarfile.REGTYPE, size, mtime, pax)


def _with_mtime(header: bytes, mtime: int) -> bytes:
    """The header block with its mtime field set and its checksum recomputed (POSIX ustar:
    the checksum sums the block with the checksum field read as spaces)."""
    block = bytearray(header)
    block[136:148] = b"%011o\0" % mtime
    block[148:156] = b" " * 8
    block[148:155] = b"%06o\0" % sum(block)
    return bytes(block)


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
    reader = _Reader(src, dst)

    def add(info: tarfile.TarInfo, data: bytes = b"") -> None:
        dst.write(info.tobuf(tarfile.PAX_FORMAT, _ENCODING, _ERRORS))
        if data:
            dst.write(data)
            dst.write(bytes(_padded(len(data)) - len(data)))

    handed_over = False
    try:
        while (member := _read_member(reader, dst)) is not None:
            name = _normalize(member.name)
            body = member.size if member.type in tarfile.REGULAR_TYPES else 0
            padding = _padded(body)
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
                dst.write(info.tobuf(tarfile.PAX_FORMAT, _ENCODING, _ERRORS))
            elif clamp:
                assert clamp_mtime is not None
                dst.write(member.blocks[:-_BLOCK] + _with_mtime(member.header, clamp_mtime))
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
        dst.write(_ZERO_BLOCK * 2)  # the end-of-archive marker
        dst.flush()
    except BrokenPipeError:
        if not handed_over:
            raise
        # A reader may stop at the end-of-archive marker and exit (mksquashfs -tar does):
        # every member was handed over, and the tool's exit status says if it read them all.
    return StreamStats(members=members, bytes_in=bytes_in, dropped=tuple(dropped),
                       replaced=tuple(replaced))
