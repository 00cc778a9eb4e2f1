"""One streamed, hashed HTTP download with resume and size checks.

A torch ROCm wheel is several GB: bytes are streamed in chunks to a seekable sink while
being hashed, never held in memory, and an interrupted download resumes with an HTTP
Range request when the server allows it safely (strong validator, If-Range). Retries and
timeouts are those of ``imagebuild.http``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import BinaryIO

import requests
import urllib3

from imagebuild.errors import DownloadError, HashMismatch, ImagebuildError
from imagebuild.http import Final, HttpClient, Retryable, check_status

ProgressCallback = Callable[[int, "int | None"], None]
"""Called as ``progress(bytes_done, total)`` after every chunk; total is None if unknown."""

CHUNK_SIZE = 1 << 20


class PinMismatch(Final):
    """The server's file is not the pinned one (its size differs)."""

    error = HashMismatch


class Transfer:
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
            raise PinMismatch(f"server sent more than {limit} bytes")
        self.sink.write(chunk)
        self.hasher.update(chunk)
        self.done += len(chunk)
        if self.progress is not None:
            self.progress(self.done, self.total)


def download(http: HttpClient, url: str, sink: BinaryIO, *, expected_size: int | None = None,
             progress: ProgressCallback | None = None,
             error: type[ImagebuildError] = DownloadError) -> Transfer:
    """Stream ``url`` into ``sink`` (seekable, empty), hashing as it goes, with retries."""
    transfer = Transfer(sink, expected_size, progress)
    http.run(url, "download", error, lambda: _download_once(http, url, transfer))
    return transfer


def _download_once(http: HttpClient, url: str, transfer: Transfer) -> None:
    # Identity encoding and raw reads: the bytes hashed are the bytes of the file, even
    # where a server labels a .tar.gz "Content-Encoding: gzip" (requests would unpack it).
    headers = {"Accept-Encoding": "identity"}
    resuming = False
    if transfer.done > 0 and transfer.validator is not None:
        resuming = True
        headers["Range"] = f"bytes={transfer.done}-"
        headers["If-Range"] = transfer.validator
    with http.session.get(url, headers=headers, stream=True,
                          timeout=http.policy.timeout) as resp:
        if resuming and resp.status_code == 206:
            total = _resumed_total(resp, transfer.done)
            if total is None:  # a Content-Range we cannot trust: start over next time
                transfer.restart()
                raise Retryable("server answered a range request with a bad Content-Range")
        elif resuming and resp.status_code == 416:  # the file shrank: start over
            transfer.restart()
            raise Retryable("HTTP 416 on resume")
        else:
            check_status(resp)
            transfer.restart()  # a 200 answer carries the whole file again
            total = _content_length(resp)
        transfer.total = total
        if total is not None and transfer.expected_size is not None \
                and total != transfer.expected_size:
            raise PinMismatch(f"server sends {total} bytes, the pin says"
                              f" {transfer.expected_size} (the file changed upstream)")
        transfer.validator = _range_validator(resp)
        try:
            for chunk in resp.raw.stream(CHUNK_SIZE, decode_content=False):
                transfer.write(chunk)
        except urllib3.exceptions.ProtocolError as exc:
            if total is not None and "IncompleteRead" in str(exc):  # closed early
                raise Retryable(f"truncated body: received {transfer.done} of {total}"
                                " bytes") from exc
            raise
    if total is not None and transfer.done < total:
        raise Retryable(f"truncated body: received {transfer.done} of {total} bytes")


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
