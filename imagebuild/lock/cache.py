"""The content-addressed download cache shared by all recipes.

Layout under the root ($IMAGEBUILD_CACHE, else $XDG_CACHE_HOME/imagebuild, else
~/.cache/imagebuild):

    sha256/<first two hex digits>/<sha256>   one read-only file per content hash
    tmp/.*.part                              downloads in progress (same filesystem, so
                                             the final rename is atomic)

A file's name in the cache is its hash, known only once every byte arrived: downloads go
to ``tmp/`` and are renamed into place after the hash (and any pin) was checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname

import requests

from imagebuild.errors import DownloadError, HashMismatch
from imagebuild.files import fsync_dir, remove_quietly
from imagebuild.http import HttpClient
from imagebuild.lock.download import CHUNK_SIZE, ProgressCallback, download

ENV_CACHE = "IMAGEBUILD_CACHE"
# Temporary files older than this were left by a killed process (SIGKILL skips cleanup).
STALE_PART_SECONDS = 24 * 3600
_SHA256 = re.compile(r"[0-9a-f]{64}")


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
        remove_quietly(staging)
        try:
            os.link(self.path, staging)
        except OSError:  # EXDEV (other filesystem), or links not allowed: symlink instead
            staging.symlink_to(self.path.resolve())
        try:
            os.replace(staging, target)
        except BaseException:
            remove_quietly(staging)
            raise
        return target


def default_cache_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV_CACHE):
        return Path(env[ENV_CACHE]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "imagebuild"


class DownloadCache:
    """Content-addressed (sha256) download cache; any http(s) or file URL."""

    def __init__(self, root: Path | str | None = None, *,
                 session: requests.Session | None = None,
                 retries: int | None = None,
                 timeout: float | tuple[float, float] | None = None,
                 backoff: float | None = None,
                 http: HttpClient | None = None):
        self.root = Path(root).expanduser() if root is not None else default_cache_root()
        self.http = http if http is not None else HttpClient.configured(
            session=session, retries=retries, timeout=timeout, backoff=backoff)

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
                    sha256, size = _copy_local(url, sink, progress)
                else:
                    transfer = download(self.http, url, sink, expected_size=expected_size,
                                        progress=progress)
                    sha256, size = transfer.hasher.hexdigest(), transfer.done
                sink.flush()
                os.fsync(sink.fileno())
            _verify(url, sha256, size, expected_sha256, expected_size)
            final = self.path_for(sha256)
            final.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(tmp, 0o444)
            os.replace(tmp, final)
            with contextlib.suppress(OSError):  # the file is in place; durability is a bonus
                fsync_dir(final.parent)
        except BaseException:  # KeyboardInterrupt too: a partial file never stays behind
            remove_quietly(tmp)
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


def _copy_local(url: str, sink: BinaryIO, progress: ProgressCallback | None) -> tuple[str, int]:
    """file:// URLs (air-gapped mirrors): the same hashing copy, no retries needed; the size
    is checked by ``_verify``, as for HTTP."""
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
    return hasher.hexdigest(), done
