"""A real HTTP wheel index on 127.0.0.1 with programmable faults, and a maker of valid wheels.

``IndexServer(directory)`` serves a directory tree the way repo.radeon.com does: every
directory is an nginx-style autoindex page (URL-encoded hrefs, link texts truncated to 50
characters, so a client that reads texts instead of hrefs fails), files are served with
Content-Length, ETag, Last-Modified and byte ranges. Faults are queued per path and consumed
one request at a time; every request is logged, so tests can count retries and prove that a
cached file caused no request at all.

    with IndexServer(tmp_path) as server:
        make_wheel(tmp_path, "torch", "2.8.0+rocm7.0.2.lw.git245bf6ed")
        server.inject("torch-2.8.0+rocm7.0.2.lw.git245bf6ed-cp312-cp312-linux_x86_64.whl",
                      Fault.status(503, times=2))
        ...; assert server.count("/torch-...whl") == 3

The tests use it through the pytest fixture ``index_server`` in tests/support/indexserver.py.
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import hashlib
import html
import io
import itertools
import os
import posixpath
import random
import re
import socket
import struct
import sys
import threading
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urlsplit

from packaging.utils import canonicalize_name
from packaging.version import Version

if TYPE_CHECKING:
    from typing import Self  # Python 3.11+; annotations are strings here (3.10 safe)

# --------------------------------------------------------------------------- faults

FAULT_KINDS = ("status", "reset", "stall", "truncate", "corrupt")


@dataclass(frozen=True)
class Fault:
    """One misbehaviour, applied to the next ``times`` requests of a path (None: all of them).

    status:   answer ``status`` (e.g. 503, 404, 403) with a short body.
    reset:    abort the TCP connection (RST) after ``after_bytes`` of the body, or before
              any response when ``after_bytes`` is None.
    stall:    send nothing (or ``after_bytes`` of the body) and hold the connection open for
              ``seconds``, then close it: longer than a client's read timeout.
    truncate: announce the full Content-Length, send ``after_bytes`` (default: half), close.
    corrupt:  send the same number of bytes with one byte changed.
    """

    kind: str
    times: int | None = 1
    status: int = 503
    seconds: float = 0.0
    after_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r}: expected one of {FAULT_KINDS}")

    @classmethod
    def http_status(cls, status: int = 503, times: int | None = 1) -> Fault:
        return cls("status", times=times, status=status)

    @classmethod
    def not_found(cls, times: int | None = None) -> Fault:
        return cls("status", times=times, status=404)

    @classmethod
    def reset(cls, times: int | None = 1, after_bytes: int | None = None) -> Fault:
        return cls("reset", times=times, after_bytes=after_bytes)

    @classmethod
    def stall(cls, seconds: float, times: int | None = 1,
              after_bytes: int | None = None) -> Fault:
        return cls("stall", times=times, seconds=seconds, after_bytes=after_bytes)

    @classmethod
    def truncate(cls, times: int | None = 1, after_bytes: int | None = None) -> Fault:
        return cls("truncate", times=times, after_bytes=after_bytes)

    @classmethod
    def corrupt(cls, times: int | None = 1) -> Fault:
        return cls("corrupt", times=times)


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    path: str  # URL path, percent-decoded
    headers: tuple[tuple[str, str], ...]
    fault: str | None  # the fault kind applied, if any
    status: int | None  # the status sent (None: reset before a response, or still running)

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None


@dataclass
class _Queued:
    fault: Fault
    left: int | None  # requests still to be hit; None: forever


# --------------------------------------------------------------------------- server


class IndexServer:
    """Serves ``directory`` at http://127.0.0.1:<port>/ (started by start() or ``with``).

    hrefs: "relative" (repo.radeon.com), "absolute" (http://host/path) or "rooted" (/path).
    ranges: honour Range/If-Range (resumable downloads) when True.
    publish_hashes: add PEP 503's ``#sha256=<hex>`` to each file's link, as simple indexes
    do (repo.radeon.com does not); ``published`` overrides the hash given for a file name.
    """

    def __init__(self, directory: Path | str, *, hrefs: str = "relative", ranges: bool = True,
                 publish_hashes: bool = False):
        if hrefs not in ("relative", "absolute", "rooted"):
            raise ValueError(f"hrefs={hrefs!r}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.hrefs = hrefs
        self.ranges = ranges
        self.publish_hashes = publish_hashes
        self.published: dict[str, str] = {}
        self._faults: dict[str, list[_Queued]] = {}
        self._log: list[LoggedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle
    def start(self) -> Self:
        handler = type("Handler", (_Handler,), {"index": self})
        httpd = _QuietServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        httpd.block_on_close = False  # stalled handlers must not hold up stop()
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="IndexServer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # addresses
    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("IndexServer is not running")
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def url_for(self, relpath: str) -> str:
        """The URL of a file or directory (a str path relative to the served directory)."""
        return self.url + quote(relpath.lstrip("/"))

    # faults and the request log
    def inject(self, path: str, *faults: Fault) -> None:
        """Queue faults for ``path`` (a filename or URL path, quoted or not), in order."""
        key = _normalise(path)
        with self._lock:
            queue = self._faults.setdefault(key, [])
            queue.extend(_Queued(f, f.times) for f in faults)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    @property
    def requests(self) -> list[LoggedRequest]:
        with self._lock:
            return list(self._log)

    def requests_for(self, path: str) -> list[LoggedRequest]:
        key = _normalise(path)
        return [r for r in self.requests if r.path == key]

    def count(self, path: str | None = None) -> int:
        """Requests made so far, to ``path`` or in all."""
        return len(self.requests if path is None else self.requests_for(path))

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    def _next_fault(self, path: str) -> Fault | None:
        with self._lock:
            queue = self._faults.get(path)
            while queue:
                head = queue[0]
                if head.left is None:
                    return head.fault
                if head.left > 0:
                    head.left -= 1
                    if head.left == 0:
                        queue.pop(0)
                    return head.fault
                queue.pop(0)
            return None

    def _record(self, entry: LoggedRequest) -> int:
        with self._lock:
            self._log.append(entry)
            return len(self._log) - 1

    def _set_status(self, position: int, status: int | None) -> None:
        with self._lock:
            if position < len(self._log):  # clear_log() may have run meanwhile
                self._log[position] = dataclasses.replace(self._log[position], status=status)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # Clients that give up (timeouts, Ctrl-C, hash mismatch) reset their connections:
        # expected here, not worth a traceback on stderr. Anything else still prints.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _normalise(path: str) -> str:
    path = unquote(urlsplit(path).path if "://" in path else path)
    return "/" + path.lstrip("/")


def unused_port_url() -> str:
    """An http URL on 127.0.0.1 where nothing listens (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


class _Handler(BaseHTTPRequestHandler):
    index: IndexServer  # set on the subclass made by IndexServer.start()
    protocol_version = "HTTP/1.1"  # keep-alive, like real servers: resets must still surface
    server_version = "nginx"

    def log_message(self, format: str, *args: object) -> None:
        pass  # the request log replaces stderr noise

    def do_HEAD(self) -> None:
        self._serve(head=True)

    def do_GET(self) -> None:
        self._serve(head=False)

    def _serve(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        fault = self.index._next_fault(path)
        # Logged on arrival, so a stalled request counts while it stalls; status filled later.
        self._log_position = self.index._record(LoggedRequest(
            method=self.command, path=path, headers=tuple(self.headers.items()),
            fault=fault.kind if fault else None, status=None))
        try:
            self._respond(path, fault, head)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its read timeout)

    def send_response(self, code: int, message: str | None = None) -> None:
        # Logged before any byte leaves: a client that has the answer sees it in the log.
        position = getattr(self, "_log_position", None)  # None: a malformed request line
        if position is not None:
            self.index._set_status(position, code)
        super().send_response(code, message)

    def _respond(self, path: str, fault: Fault | None, head: bool) -> int | None:
        if fault is not None and fault.kind == "status":
            return self._send_simple(fault.status)
        if fault is not None and fault.after_bytes is None and fault.kind in ("reset", "stall"):
            return self._misbehave(fault, b"")
        target = self._resolve(path)
        if target is None or not target.exists():
            return self._send_simple(404)
        if target.is_dir():
            if not path.endswith("/"):
                return self._send_simple(301, location=quote(path) + "/")
            body = self._listing(path, target).encode()
            return self._send_body(200, body, "text/html", head=head)
        return self._send_file(target, fault, head)

    def _resolve(self, path: str) -> Path | None:
        clean = posixpath.normpath(path)
        if ".." in clean.split("/"):
            return None
        return self.index.directory / clean.lstrip("/")

    def _send_simple(self, status: int, location: str | None = None) -> int:
        body = f"<html><body><h1>{status} {self.responses.get(status, ('',))[0]}</h1></body></html>"
        self.send_response(status)
        if location:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())
        return status

    def _send_body(self, status: int, body: bytes, ctype: str, head: bool) -> int:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)
        return status

    def _send_file(self, target: Path, fault: Fault | None, head: bool) -> int | None:
        """Stream the file from disk (tests may serve GBs), applying a body fault."""
        stat = target.stat()
        size = stat.st_size
        if fault is not None and fault.kind == "corrupt" and size == 0:
            return self._send_body(200, b"\0", "application/octet-stream", head)
        etag = f'"{size:x}-{stat.st_mtime_ns:x}"'
        start, end, status = 0, size, 200
        wanted = self._range(etag, stat.st_mtime, size)
        if wanted is not None:
            (start, end), status = wanted, 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(end - start))
        self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
        self.send_header("ETag", etag)
        if self.index.ranges:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
        self.end_headers()
        if head:
            return status
        misbehaving = fault is not None and fault.kind in ("reset", "stall", "truncate")
        limit = end - start
        if misbehaving:
            default = limit // 2 if fault.kind == "truncate" else 0
            limit = min(limit, fault.after_bytes if fault.after_bytes is not None else default)
        flip = size // 2 if fault is not None and fault.kind == "corrupt" else None
        with target.open("rb") as handle:
            handle.seek(start)
            position = start
            while position < start + limit:
                chunk = handle.read(min(1 << 20, start + limit - position))
                if not chunk:
                    break
                if flip is not None and position <= flip < position + len(chunk):
                    changed = bytearray(chunk)
                    changed[flip - position] ^= 0xFF  # same length, one byte different
                    chunk = bytes(changed)
                self.wfile.write(chunk)
                position += len(chunk)
        if misbehaving:
            self._misbehave(fault, b"")
        return status

    def _range(self, etag: str, mtime: float, size: int) -> tuple[int, int] | None:
        """[start, end) of a satisfiable single-range request (bytes=A-, A-B or -N), honouring
        If-Range; None means "send the whole file" (RFC 9110 allows ignoring Range)."""
        header = self.headers.get("Range")
        if not self.index.ranges or not header:
            return None
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", header.strip())
        if not match or not any(match.groups()):
            return None
        first, last = match.groups()
        if first:
            start = int(first)
            end = min(int(last) + 1, size) if last else size
        else:  # a suffix: the last N bytes
            start, end = max(0, size - int(last)), size
        if start >= end:
            return None
        if_range = self.headers.get("If-Range")
        if if_range and if_range not in (etag, email.utils.formatdate(mtime, usegmt=True)):
            return None  # the file changed: the whole file, 200
        return start, end

    def _misbehave(self, fault: Fault, sent: bytes) -> None:
        if sent:
            self.wfile.write(sent)
        self.wfile.flush()
        self.close_connection = True
        if fault.kind == "stall":
            self.index._stopping.wait(fault.seconds)
        elif fault.kind == "reset":
            # SO_LINGER 0: close() sends RST instead of FIN, i.e. "connection reset by peer".
            # The socket is only closed once its file objects are: close those first, and
            # hand the stdlib's later flush()/close() calls a harmless buffer instead.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
            self.rfile.close()
            self.wfile.close()
            self.connection.close()
            self.wfile = io.BytesIO()

    def _listing(self, path: str, directory: Path) -> str:
        """An nginx autoindex page, the shape of repo.radeon.com/rocm/manylinux/rocm-rel-*/."""
        rows = ['<a href="../">../</a>']
        entries = sorted((p for p in directory.iterdir() if not p.name.startswith(".")),
                         key=lambda p: (not p.is_dir(), p.name))
        for entry in entries:
            name = entry.name + ("/" if entry.is_dir() else "")
            href = quote(name)
            if self.index.hrefs == "rooted":
                href = quote(path) + href
            elif self.index.hrefs == "absolute":
                href = self.index.url.rstrip("/") + quote(path) + href
            if self.index.publish_hashes and entry.is_file():
                digest = self.index.published.get(entry.name) or sha256_of(entry)
                href += f"#sha256={digest}"
            text = name if len(name) <= 50 else name[:47] + "..>"
            stat = entry.stat()
            date = email.utils.formatdate(stat.st_mtime, usegmt=True)[5:22]
            size = "-" if entry.is_dir() else str(stat.st_size)
            rows.append(f'<a href="{html.escape(href)}">{html.escape(text)}</a>'
                        f'{" " * max(1, 51 - len(text))}{date} {size:>19}')
        title = html.escape(f"Index of {path}")
        return (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n"
                f"<h1>{title}</h1><hr><pre>" + "\r\n".join(rows) +
                "\r\n</pre><hr></body>\r\n</html>\r\n")



# --------------------------------------------------------------------------- wheels

_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip timestamps: same inputs, same bytes, same sha256


def wheel_filename(name: str, version: str, python_tag: str = "cp312",
                   abi_tag: str | None = None, platform: str = "linux_x86_64") -> str:
    dist = re.sub(r"[-_.]+", "_", canonicalize_name(name))
    abi = abi_tag or (python_tag if python_tag.startswith("cp") else "none")
    return f"{dist}-{Version(version)}-{python_tag}-{abi}-{platform}.whl"


def make_wheel(directory: Path | str, name: str, version: str, python_tag: str = "cp312",
               abi_tag: str | None = None, platform: str = "linux_x86_64",
               requires: Iterable[str] = (), *, requires_python: str | None = None,
               payload_size: int = 0, files: Mapping[str, bytes] | None = None,
               provides_extras: Iterable[str] = ()) -> Path:
    """Write a small, valid, reproducible wheel (METADATA, WHEEL, RECORD) into ``directory``.

    The wheel installs a package named like the project (``torch`` -> ``torch/__init__.py``
    with ``__version__``). ``payload_size`` adds that many deterministic pseudo-random bytes,
    stored uncompressed, for tests that need a body of many chunks. ``requires`` become its
    ``Requires-Dist`` lines (``testbed.rocm_wheels`` gives ROCm wheels the ones the real
    wheels state). ``files`` (archive path -> bytes) replaces that package with exactly
    these files; shared objects (``*.so*``) are stored executable. ``provides_extras`` become
    ``Provides-Extra`` lines (core metadata 2.1), for requirements marked ``extra == "..."``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    filename = wheel_filename(name, version, python_tag, abi_tag, platform)
    dist, norm_version, python_tag, abi, platform = filename[:-4].split("-")
    package = dist.lower()
    distinfo = f"{dist}-{norm_version}.dist-info"
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {norm_version}",
                "Summary: test wheel made by testbed/wheel_index.py"]
    if requires_python:
        metadata.append(f"Requires-Python: {requires_python}")
    metadata += [f"Provides-Extra: {extra}" for extra in provides_extras]
    metadata += [f"Requires-Dist: {req}" for req in requires]
    tags = [f"{py}-{ab}-{pl}" for py, ab, pl in itertools.product(
        python_tag.split("."), abi.split("."), platform.split("."))]
    purelib = "true" if abi == "none" and platform == "any" else "false"
    wheel = ["Wheel-Version: 1.0", "Generator: imagebuild-tests", f"Root-Is-Purelib: {purelib}"]
    wheel += [f"Tag: {tag}" for tag in tags]
    members: list[tuple[str, bytes, int]] = (
        [(path, data, zipfile.ZIP_DEFLATED) for path, data in files.items()]
        if files is not None else
        [(f"{package}/__init__.py", f'__version__ = "{norm_version}"\n'.encode(),
          zipfile.ZIP_DEFLATED)])
    if payload_size:
        payload = random.Random(f"{filename}:{payload_size}").randbytes(payload_size)
        members.append((f"{package}/_payload.bin", payload, zipfile.ZIP_STORED))
    members.append((f"{distinfo}/METADATA", ("\n".join(metadata) + "\n").encode(),
                    zipfile.ZIP_DEFLATED))
    members.append((f"{distinfo}/WHEEL", ("\n".join(wheel) + "\n").encode(),
                    zipfile.ZIP_DEFLATED))
    record = [f"{path},sha256={_record_hash(data)},{len(data)}" for path, data, _ in members]
    record.append(f"{distinfo}/RECORD,,")
    members.append((f"{distinfo}/RECORD", ("\n".join(record) + "\n").encode(),
                    zipfile.ZIP_DEFLATED))
    target = directory / filename
    tmp = target.with_name(f".{filename}.tmp")
    with zipfile.ZipFile(tmp, "w") as archive:
        for path, data, compression in members:
            info = zipfile.ZipInfo(path, date_time=_FIXED_TIME)
            executable = ".so" in path.rsplit("/", 1)[-1]
            info.external_attr = (0o755 if executable else 0o644) << 16
            info.compress_type = compression
            archive.writestr(info, data)
    os.replace(tmp, target)  # a server thread never serves a half-written wheel
    return target


def _record_hash(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def sha256_of(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
