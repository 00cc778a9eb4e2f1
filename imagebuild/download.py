"""HTTP with retries, and streamed, hashed downloads into one cache shared by all recipes.

Network policy (issue 2): retry with exponential backoff on connection errors, resets,
timeouts, truncated bodies and 5xx (also 408 and 429); never on other 4xx, which are
answers, not accidents. Attempts and the per-request (connect, read) timeout are bounded
and configurable: constructor arguments, else IMAGEBUILD_HTTP_RETRIES (retries after the
first attempt) and IMAGEBUILD_HTTP_TIMEOUT (seconds, or "CONNECT,READ").

Cache layout under the root ($IMAGEBUILD_CACHE, else $XDG_CACHE_HOME/imagebuild, else
~/.cache/imagebuild):

    sha256/<first two hex digits>/<sha256>   one read-only file per content hash
    tmp/.*.part                              downloads in progress (same filesystem, so
                                             the final rename is atomic)

A torch ROCm wheel is several GB: bytes are streamed in chunks to a temporary file while
being hashed, never held in memory, and an interrupted download resumes with an HTTP
Range request when the server allows it safely (strong validator, If-Range).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import requests
import tenacity
import urllib3

from imagebuild import __version__
from imagebuild.errors import DownloadError, HashMismatch, ImagebuildError

ProgressCallback = Callable[[int, "int | None"], None]
"""Called as ``progress(bytes_done, total)`` after every chunk; total is None if unknown."""

CHUNK_SIZE = 1 << 20
USER_AGENT = f"imagebuild/{__version__}"
ENV_RETRIES = "IMAGEBUILD_HTTP_RETRIES"
ENV_TIMEOUT = "IMAGEBUILD_HTTP_TIMEOUT"
ENV_CACHE = "IMAGEBUILD_CACHE"
# Temporary files older than this were left by a killed process (SIGKILL skips cleanup).
STALE_PART_SECONDS = 24 * 3600

# --------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class HttpPolicy:
    """How hard to try: attempts = retries + 1; waits grow from ``backoff`` to ``backoff_max``."""

    retries: int = 4
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    backoff: float = 1.0
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("timeouts must be > 0")
        if self.backoff < 0 or self.backoff_max < 0:
            raise ValueError("backoff must be >= 0")

    @property
    def attempts(self) -> int:
        return self.retries + 1

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.connect_timeout, self.read_timeout)

    @classmethod
    def resolve(
        cls,
        *,
        retries: int | None = None,
        timeout: float | tuple[float, float] | None = None,
        backoff: float | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> HttpPolicy:
        """Arguments win over the environment, which wins over the defaults."""
        env = os.environ if environ is None else environ
        default = cls()
        if retries is None:
            retries = _env_int(env, ENV_RETRIES, default.retries)
        if timeout is None:
            timeout = _env_timeout(env, ENV_TIMEOUT, default.timeout)
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        backoff = default.backoff if backoff is None else backoff
        return cls(retries=retries, connect_timeout=float(connect), read_timeout=float(read),
                   backoff=backoff, backoff_max=max(default.backoff_max, backoff))


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ImagebuildError(f"environment {key}={raw!r}: expected a whole number of retries >= 0")
    return int(raw)


def _env_timeout(env: Mapping[str, str], key: str,
                 default: tuple[float, float]) -> tuple[float, float]:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        parts = [float(p) for p in raw.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) <= 0:
        raise ImagebuildError(
            f"environment {key}={raw!r}: expected seconds > 0, or CONNECT,READ seconds")
    return (parts[0], parts[-1])


# --------------------------------------------------------------------------- failures


class _Retryable(Exception):
    """A failure worth another attempt (5xx, truncated body); str() is the reason."""


class _Final(Exception):
    """A failure no retry can fix (4xx, size differs from the pin); str() is the reason."""


class _PinMismatch(_Final):
    """The server's file is not the pinned one (its size differs): raised as HashMismatch."""


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, requests.exceptions.SSLError):  # a certificate does not fix itself
        return False
    return isinstance(exc, (
        _Retryable,
        requests.ConnectionError,  # refused, reset, DNS, and read timeouts while streaming
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.ProtocolError,  # raw.stream(): reset or short body mid-transfer
        urllib3.exceptions.TimeoutError,  # raw.stream(): stall mid-transfer
    ))


def _is_retryable_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def _describe(exc: BaseException, policy: HttpPolicy) -> str:
    """One short line for a network failure (requests' own messages nest four reprs deep)."""
    if isinstance(exc, (_Retryable, _Final)):
        return str(exc)
    if isinstance(exc, requests.ConnectTimeout):
        return f"connection timed out after {policy.connect_timeout:g}s"
    text = str(exc)
    if isinstance(exc, (requests.ReadTimeout, urllib3.exceptions.ReadTimeoutError)) \
            or "Read timed out" in text:
        return f"no data for {policy.read_timeout:g}s (read timeout)"
    match = _ERRNO_TEXT.search(text)
    if match:
        return match.group(1).strip().lower()
    for phrase in ("Remote end closed connection without response", "Connection reset by peer",
                   "Connection refused", "Connection aborted", "IncompleteRead"):
        if phrase in text:
            return phrase.lower()
    line = " ".join(text.split()) or type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


# --------------------------------------------------------------------------- client


class HttpClient:
    """A requests session plus the retry policy; raises ``error`` (an ImagebuildError class)."""

    def __init__(self, session: requests.Session | None = None, policy: HttpPolicy | None = None,
                 *, sleep: Callable[[float], None] = time.sleep):
        self.session = session if session is not None else _new_session()
        self.policy = policy if policy is not None else HttpPolicy.resolve()
        self._sleep = sleep

    def _retrying(self) -> tenacity.Retrying:
        p = self.policy
        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(p.attempts),
            # backoff * 2**n plus jitter up to one backoff, so that parallel clients spread
            # (spelled out: wait_exponential_jitter's arguments changed across tenacity 8/9).
            wait=tenacity.wait_exponential(multiplier=p.backoff, max=p.backoff_max)
            + tenacity.wait_random(0, p.backoff),
            retry=tenacity.retry_if_exception(_is_transient),
            reraise=True,
            sleep=self._sleep,
        )

    def _run(self, url: str, what: str, error: type[ImagebuildError], once: Callable[[], object]):
        """Call ``once`` with retries; turn the last failure into one clear ``error`` line."""
        attempts = 0
        try:
            for attempt in self._retrying():
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    return once()
        except (_Final, _Retryable, requests.RequestException,
                urllib3.exceptions.HTTPError) as exc:
            reason = _describe(exc, self.policy)
            tries = f" after {attempts} attempts" if attempts > 1 else ""
            kind = HashMismatch if isinstance(exc, _PinMismatch) else error
            raise kind(f"{what} {url}: {reason}{tries}") from exc
        except OSError as exc:  # local, e.g. the cache disk is full: not retried
            raise error(f"{what} {url}: {exc.strerror or exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def get_text(self, url: str, *, what: str = "GET",
                 error: type[ImagebuildError] = DownloadError) -> tuple[str, str]:
        """A small document (an index listing): returns (text, final URL after redirects)."""

        def once() -> tuple[str, str]:
            with self.session.get(url, timeout=self.policy.timeout) as resp:
                _check_status(resp)
                body = resp.content  # small: a listing is a few hundred KB at most
                return body.decode(resp.encoding or "utf-8", errors="replace"), resp.url

        return self._run(url, what, error, once)

    def download(self, url: str, sink: BinaryIO, *, expected_size: int | None = None,
                 progress: ProgressCallback | None = None,
                 error: type[ImagebuildError] = DownloadError) -> _Transfer:
        """Stream ``url`` into ``sink`` (seekable, empty), hashing as it goes."""
        transfer = _Transfer(sink, expected_size, progress)
        self._run(url, "download", error, lambda: self._download_once(url, transfer))
        return transfer

    def _download_once(self, url: str, transfer: _Transfer) -> None:
        # Identity encoding and raw reads: the bytes hashed are the bytes of the file, even
        # where a server labels a .tar.gz "Content-Encoding: gzip" (requests would unpack it).
        headers = {"Accept-Encoding": "identity"}
        resuming = transfer.done > 0 and transfer.validator is not None
        if resuming:
            headers["Range"] = f"bytes={transfer.done}-"
            headers["If-Range"] = transfer.validator
        with self.session.get(url, headers=headers, stream=True,
                              timeout=self.policy.timeout) as resp:
            if resuming and resp.status_code == 206:
                total = _resumed_total(resp, transfer.done)
                if total is None:  # a Content-Range we cannot trust: start over next time
                    transfer.restart()
                    raise _Retryable("server answered a range request with a bad Content-Range")
            elif resuming and resp.status_code == 416:  # the file shrank: start over
                transfer.restart()
                raise _Retryable("HTTP 416 on resume")
            else:
                _check_status(resp)
                transfer.restart()  # a 200 answer carries the whole file again
                total = _content_length(resp)
            transfer.total = total
            if total is not None and transfer.expected_size is not None \
                    and total != transfer.expected_size:
                raise _PinMismatch(f"server sends {total} bytes, the pin says"
                                   f" {transfer.expected_size} (the file changed upstream)")
            transfer.validator = _range_validator(resp)
            try:
                for chunk in resp.raw.stream(CHUNK_SIZE, decode_content=False):
                    transfer.write(chunk)
            except urllib3.exceptions.ProtocolError as exc:
                if total is not None and "IncompleteRead" in str(exc):  # closed early
                    raise _Retryable(f"truncated body: received {transfer.done} of {total}"
                                     " bytes") from exc
                raise
        if total is not None and transfer.done < total:
            raise _Retryable(f"truncated body: received {transfer.done} of {total} bytes")


def _new_session() -> requests.Session:
    session = requests.Session()
    session.headers["User-Agent"] = USER_AGENT
    return session


def _check_status(resp: requests.Response) -> None:
    if resp.status_code < 400:
        return
    reason = f"HTTP {resp.status_code} {resp.reason or ''}".rstrip()
    if _is_retryable_status(resp.status_code):
        raise _Retryable(reason)
    raise _Final(f"{reason} (not retried)")


def _content_length(resp: requests.Response) -> int | None:
    raw = resp.headers.get("Content-Length", "")
    return int(raw) if raw.isdigit() else None


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


def _resumed_total(resp: requests.Response, offset: int) -> int | None:
    match = _CONTENT_RANGE.fullmatch(resp.headers.get("Content-Range", "").strip())
    if not match or int(match.group(1)) != offset:
        return None
    return int(match.group(3))


def _range_validator(resp: requests.Response) -> str | None:
    """A validator for If-Range, so a resumed download never splices two versions of a file.

    RFC 9110 13.1.5: If-Range needs a strong ETag or a Last-Modified date; no validator or
    no "Accept-Ranges: bytes" means restarting from zero after a failure.
    """
    if resp.headers.get("Accept-Ranges", "").strip().lower() != "bytes":
        return None
    etag = resp.headers.get("ETag", "").strip()
    if etag and not etag.startswith("W/"):
        return etag
    return resp.headers.get("Last-Modified") or None


class _Transfer:
    """Bytes written so far to the sink, their running hash, and resume state."""

    def __init__(self, sink: BinaryIO, expected_size: int | None,
                 progress: ProgressCallback | None):
        self.sink = sink
        self.expected_size = expected_size
        self.progress = progress
        self.hasher = hashlib.sha256()
        self.done = 0
        self.total: int | None = expected_size
        self.validator: str | None = None

    def restart(self) -> None:
        self.sink.seek(0)
        self.sink.truncate()
        self.hasher = hashlib.sha256()
        self.done = 0
        self.validator = None

    def write(self, chunk: bytes) -> None:
        limit = self.total if self.total is not None else self.expected_size
        if limit is not None and self.done + len(chunk) > limit:
            raise _PinMismatch(f"server sent more than {limit} bytes")
        self.sink.write(chunk)
        self.hasher.update(chunk)
        self.done += len(chunk)
        if self.progress is not None:
            self.progress(self.done, self.total)


# --------------------------------------------------------------------------- cache


@dataclass(frozen=True)
class CachedFile:
    """A verified file in the cache; ``filename`` is its original name (from the URL)."""

    path: Path
    sha256: str
    size: int
    url: str
    filename: str

    def link_into(self, directory: Path | str, filename: str | None = None) -> Path:
        """Make the file visible as ``directory/filename`` (e.g. a uv --find-links dir).

        A hardlink where the cache and the directory share a filesystem, else a symlink;
        an existing entry is replaced atomically. Cache files are read-only, so a hardlink
        cannot be used to alter the cache.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / (filename or self.filename)
        if target.exists() and os.path.samefile(target, self.path):
            return target
        staging = directory / f".{target.name}.{os.getpid()}.link"
        with contextlib.suppress(FileNotFoundError):
            staging.unlink()
        try:
            os.link(self.path, staging)
        except OSError:  # EXDEV (other filesystem), or links not allowed: symlink instead
            staging.symlink_to(self.path.resolve())
        try:
            os.replace(staging, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()
            raise
        return target


def default_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV_CACHE):
        return Path(env[ENV_CACHE]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "imagebuild"


_SHA256 = re.compile(r"[0-9a-f]{64}")


class DownloadCache:
    """Content-addressed (sha256) download cache; any http(s) or file URL."""

    def __init__(self, root: Path | str | None = None, *,
                 session: requests.Session | None = None,
                 retries: int | None = None,
                 timeout: float | tuple[float, float] | None = None,
                 backoff: float | None = None,
                 http: HttpClient | None = None):
        self.root = Path(root).expanduser() if root is not None else default_cache_root()
        self.http = http if http is not None else HttpClient(
            session, HttpPolicy.resolve(retries=retries, timeout=timeout, backoff=backoff))

    def path_for(self, sha256: str) -> Path:
        sha256 = _check_sha256(sha256)
        return self.root / "sha256" / sha256[:2] / sha256

    def contains(self, sha256: str) -> bool:
        return self.path_for(sha256).is_file()

    def fetch(self, url: str, *, expected_sha256: str | None = None,
              expected_size: int | None = None, filename: str | None = None,
              progress: ProgressCallback | None = None) -> CachedFile:
        """Return the verified, cached bytes of ``url``; download only if not cached.

        With ``expected_sha256`` a cached copy is used without any network access; bytes
        that differ raise HashMismatch and are never kept (a pin is never silently updated).
        """
        filename = filename or _filename_from_url(url)
        if expected_sha256 is not None:
            expected_sha256 = _check_sha256(expected_sha256.lower())
            cached = self._cached(expected_sha256, expected_size, url, filename)
            if cached is not None:
                return cached
        tmp_dir = self.root / "tmp"
        tmp_dir.mkdir(parents=True, exist_ok=True)
        self._sweep_stale(tmp_dir)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{filename}.", suffix=".part", dir=tmp_dir)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "w+b") as sink:
                if urlsplit(url).scheme == "file":
                    sha256, size = _copy_local(url, sink, expected_size, progress)
                else:
                    transfer = self.http.download(url, sink, expected_size=expected_size,
                                                  progress=progress)
                    sha256, size = transfer.hasher.hexdigest(), transfer.done
                sink.flush()
                os.fsync(sink.fileno())
            _verify(url, sha256, size, expected_sha256, expected_size)
            final = self.path_for(sha256)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(tmp, 0o444)
            os.replace(tmp, final)
            _fsync_dir(final.parent)
        except BaseException:  # KeyboardInterrupt too: a partial file never stays behind
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        return CachedFile(path=final, sha256=sha256, size=size, url=url, filename=filename)

    def _cached(self, sha256: str, size: int | None, url: str,
                filename: str) -> CachedFile | None:
        path = self.path_for(sha256)
        try:
            actual = path.stat().st_size
        except FileNotFoundError:
            return None
        if size is not None and actual != size:  # damaged on disk: drop it, fetch again
            path.unlink()
            return None
        return CachedFile(path=path, sha256=sha256, size=actual, url=url, filename=filename)

    @staticmethod
    def _sweep_stale(tmp_dir: Path) -> None:
        cutoff = time.time() - STALE_PART_SECONDS
        for entry in tmp_dir.glob(".*.part"):
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < cutoff:
                    entry.unlink()


def _check_sha256(value: str) -> str:
    if not _SHA256.fullmatch(value):
        raise ValueError(f"not a sha256 hex digest: {value!r}")
    return value


def _verify(url: str, sha256: str, size: int, expected_sha256: str | None,
            expected_size: int | None) -> None:
    if expected_sha256 is not None and sha256 != expected_sha256:
        raise HashMismatch(f"{url}: sha256 {sha256} does not match the pinned {expected_sha256}"
                           " (the file changed upstream or in transit; nothing was cached)")
    if expected_size is not None and size != expected_size:
        raise HashMismatch(f"{url}: {size} bytes, the pin says {expected_size}"
                           " (nothing was cached)")


def _filename_from_url(url: str) -> str:
    name = unquote(urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1])
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise DownloadError(f"download {url}: the URL names no file; pass filename=")
    return name


def _copy_local(url: str, sink: BinaryIO, expected_size: int | None,
                progress: ProgressCallback | None) -> tuple[str, int]:
    """file:// URLs (air-gapped mirrors): the same hashing copy, no retries needed."""
    path = Path(url2pathname(urlsplit(url).path))
    hasher = hashlib.sha256()
    done = 0
    try:
        total = path.stat().st_size
        with path.open("rb") as src:
            while chunk := src.read(CHUNK_SIZE):
                sink.write(chunk)
                hasher.update(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
    except OSError as exc:
        raise DownloadError(f"download {url}: {exc.strerror or exc}") from exc
    del expected_size  # checked by _verify, like for HTTP
    return hasher.hexdigest(), done


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX: the directory entry lives in the directory)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
