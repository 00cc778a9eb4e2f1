"""A tar stream read and written block by block, as the filter streams an image: each
member's header blocks as they came (pax and GNU extension headers kept with it), its body
copied through without being held, mtimes rewritten in place (the header's checksum with
them), and a writer that hands a pipe its bytes with splice where it can."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from dataclasses import dataclass
from typing import IO, Any, BinaryIO

BLOCK = 512
ZERO_BLOCK = bytes(BLOCK)
#: How names are read and written: PAX headers are UTF-8; other bytes survive as they are.
ENCODING, ERRORS = "utf-8", "surrogateescape"
#: Header types that describe the next member instead of being one: PAX per-member records,
#: GNU long name and long link name.
_EXTENSIONS = (tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_TYPES = {tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.LNKTYPE, tarfile.SYMTYPE, tarfile.CHRTYPE,
          tarfile.BLKTYPE, tarfile.DIRTYPE, tarfile.FIFOTYPE, tarfile.CONTTYPE}


def padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _text(field: bytes) -> str:
    return field.split(b"\0", 1)[0].decode(ENCODING, ERRORS)


def _pax_records(data: bytes) -> dict[str, str]:
    """POSIX pax extended header records: "<length> <key>=<value>\\n" each."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        space = data.index(b" ", pos)
        length = int(data[pos:space])
        key, _, value = data[space + 1:pos + length - 1].partition(b"=")
        records[key.decode(ENCODING, ERRORS)] = value.decode(ENCODING, ERRORS)
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


class Reader:
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
        held = self._fill(BLOCK)
        if not held:
            return b""
        if held < BLOCK:
            raise tarfile.ReadError("unexpected end of the tar stream")
        with self._take(BLOCK) as view:
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
class Member:
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


def read_member(reader: Reader, dst: IO[bytes]) -> Member | None:
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
        if header == ZERO_BLOCK:
            return None
        if not _checksum_ok(header):
            raise tarfile.ReadError("bad checksum in a tar header")
        kind = header[156:157]
        size = _number(header[124:136])
        if kind in _EXTENSIONS or kind == tarfile.XGLTYPE:
            data = reader.read(padded(size))
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
        return Member(b"".join(extensions) + header, header, name, linkname,
                       kind if kind in _TYPES else tarfile.REGTYPE, size, mtime, pax)


def with_mtime(header: bytes, mtime: int) -> bytes:
    """The header block with its mtime field set and its checksum recomputed (POSIX ustar:
    the checksum sums the block with the checksum field read as spaces)."""
    block = bytearray(header)
    block[136:148] = b"%011o\0" % mtime
    block[148:156] = b" " * 8
    block[148:155] = b"%06o\0" % sum(block)
    return bytes(block)
