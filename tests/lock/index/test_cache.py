"""Streamed, hashed, cached downloads against a real server with injected faults."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from imagebuild.errors import DownloadError, HashMismatch
from imagebuild.lock.cache import DownloadCache, default_cache_root
from tests.lock.index.conftest import FAST, READ_TIMEOUT, RETRIES, TORCH
from tests.support.indexserver import Fault, IndexServer, make_wheel, sha256_of

ATTEMPTS = RETRIES + 1
PAYLOAD = 3 << 20  # a body of several 1 MiB chunks


@pytest.fixture
def wheel(index_server: IndexServer) -> Path:
    return make_wheel(index_server.directory, "torch", TORCH, payload_size=PAYLOAD)


def url_of(server: IndexServer, path: Path) -> str:
    return server.url_for(path.name)


def cache_entries(cache: DownloadCache) -> list[Path]:
    """Every file in the cache, temporary ones included."""
    return sorted(p for p in cache.root.rglob("*") if p.is_file())


def test_fetch_streams_hashes_and_stores_by_sha256(index_server: IndexServer, wheel: Path,
                                                   cache: DownloadCache) -> None:
    expected = sha256_of(wheel)
    cached = cache.fetch(url_of(index_server, wheel))

    assert cached.sha256 == expected
    assert cached.size == wheel.stat().st_size
    assert cached.filename == wheel.name  # percent-decoded: "+" not "%2B"
    assert cached.url == url_of(index_server, wheel)
    assert cached.path == cache.root / "sha256" / expected[:2] / expected
    assert cached.path.read_bytes() == wheel.read_bytes()
    assert cached.path.stat().st_mode & 0o222 == 0  # read-only: links cannot alter it
    assert cache_entries(cache) == [cached.path]
    assert cache.contains(expected)


def test_cached_file_is_reused_without_any_request(index_server: IndexServer, wheel: Path,
                                                   cache: DownloadCache) -> None:
    first = cache.fetch(url_of(index_server, wheel))
    index_server.clear_log()
    index_server.stop()  # a dead server proves there is no network at all

    again = cache.fetch(first.url, expected_sha256=first.sha256, expected_size=first.size)

    assert again.path == first.path and again.sha256 == first.sha256
    assert index_server.count() == 0


def test_reuse_counts_zero_requests_on_a_live_server(index_server: IndexServer, wheel: Path,
                                                     tmp_path: Path) -> None:
    first = DownloadCache(tmp_path / "shared", **FAST).fetch(url_of(index_server, wheel))
    index_server.clear_log()
    # Another recipe, another DownloadCache object, the same cache directory.
    other = DownloadCache(tmp_path / "shared", **FAST)
    assert other.fetch(first.url, expected_sha256=first.sha256.upper()).path == first.path
    assert index_server.count() == 0


def test_without_a_pin_the_bytes_are_fetched_again(index_server: IndexServer, wheel: Path,
                                                   cache: DownloadCache) -> None:
    cache.fetch(url_of(index_server, wheel))
    cache.fetch(url_of(index_server, wheel))
    assert index_server.count(wheel.name) == 2
    assert len(cache_entries(cache)) == 1


def test_503_then_success(index_server: IndexServer, wheel: Path, cache: DownloadCache) -> None:
    index_server.inject(wheel.name, Fault.http_status(503, times=2))
    cached = cache.fetch(url_of(index_server, wheel), expected_sha256=sha256_of(wheel))
    assert cached.sha256 == sha256_of(wheel)
    assert [r.status for r in index_server.requests_for(wheel.name)] == [503, 503, 200]


@pytest.mark.parametrize("fault", [Fault.truncate(), Fault.stall(5 * READ_TIMEOUT,
                                                                 after_bytes=PAYLOAD // 2)],
                         ids=["truncated", "stalled"])
def test_interrupted_body_resumes_with_a_range_request(index_server: IndexServer, wheel: Path,
                                                       cache: DownloadCache,
                                                       fault: Fault) -> None:
    index_server.inject(wheel.name, fault)
    cached = cache.fetch(url_of(index_server, wheel))

    assert cached.sha256 == sha256_of(wheel)
    first, second = index_server.requests_for(wheel.name)
    assert first.fault == fault.kind
    assert second.status == 206
    offset = int(second.header("Range").removeprefix("bytes=").rstrip("-"))
    assert 0 < offset < wheel.stat().st_size
    assert second.header("If-Range")  # never splices two versions of a file


def test_server_without_ranges_restarts_from_zero(tmp_path: Path, cache: DownloadCache) -> None:
    with IndexServer(tmp_path / "plain", ranges=False) as server:
        wheel = make_wheel(server.directory, "torch", TORCH, payload_size=PAYLOAD)
        server.inject(wheel.name, Fault.truncate())
        cached = cache.fetch(url_of(server, wheel))
        assert cached.sha256 == sha256_of(wheel)
        assert [(r.status, r.header("Range")) for r in server.requests_for(wheel.name)] == [
            (200, None), (200, None)]


def test_reset_mid_body_is_retried(index_server: IndexServer, wheel: Path,
                                   cache: DownloadCache) -> None:
    index_server.inject(wheel.name, Fault.reset(after_bytes=1000), Fault.reset())
    assert cache.fetch(url_of(index_server, wheel)).sha256 == sha256_of(wheel)
    assert index_server.count(wheel.name) == 3


@pytest.mark.parametrize(("fault", "reason"), [
    (Fault.truncate(times=None), "truncated body: received "),
    (Fault.stall(5 * READ_TIMEOUT, times=None, after_bytes=1000),
     f"no data for {READ_TIMEOUT:g}s (read timeout)"),
    (Fault.reset(times=None), "connection reset by peer"),
    (Fault.http_status(503, times=None), "HTTP 503 Service Unavailable"),
], ids=["truncated", "stalled", "reset", "503"])
def test_persistent_fault_fails_clearly_and_leaves_nothing(
        index_server: IndexServer, wheel: Path, cache: DownloadCache, fault: Fault,
        reason: str) -> None:
    index_server.inject(wheel.name, fault)
    with pytest.raises(DownloadError) as caught:
        cache.fetch(url_of(index_server, wheel))
    message = str(caught.value)
    assert message.startswith(f"download {url_of(index_server, wheel)}: {reason}"), message
    assert message.endswith(f" after {ATTEMPTS} attempts")
    assert index_server.count(wheel.name) == ATTEMPTS
    assert cache_entries(cache) == []


def test_truncated_body_reports_how_much_arrived(tmp_path: Path, cache: DownloadCache) -> None:
    with IndexServer(tmp_path / "plain", ranges=False) as server:
        wheel = make_wheel(server.directory, "torch", TORCH, payload_size=PAYLOAD)
        server.inject(wheel.name, Fault.truncate(times=None, after_bytes=1234))
        with pytest.raises(DownloadError, match=f"truncated body: received 1234 of "
                                                f"{wheel.stat().st_size} bytes after 3 attempts"):
            cache.fetch(url_of(server, wheel))
    assert cache_entries(cache) == []


def test_404_is_not_retried(index_server: IndexServer, cache: DownloadCache) -> None:
    url = index_server.url_for("torch-0.0.0-cp312-cp312-linux_x86_64.whl")
    with pytest.raises(DownloadError) as caught:
        cache.fetch(url)
    assert str(caught.value) == f"download {url}: HTTP 404 Not Found (not retried)"
    assert index_server.count() == 1
    assert cache_entries(cache) == []


def test_changed_bytes_raise_hash_mismatch_and_cache_nothing(
        index_server: IndexServer, wheel: Path, cache: DownloadCache, tmp_path: Path) -> None:
    pinned = sha256_of(wheel)
    index_server.inject(wheel.name, Fault.corrupt())
    # What the corrupted bytes hash to, computed independently of the client.
    data = bytearray(wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "changed").write_bytes(bytes(data))
    actual = sha256_of(tmp_path / "changed")

    with pytest.raises(HashMismatch) as caught:
        cache.fetch(url_of(index_server, wheel), expected_sha256=pinned)

    assert str(caught.value) == (
        f"{url_of(index_server, wheel)}: sha256 {actual} does not match the pinned {pinned}"
        " (the file changed upstream or in transit; nothing was cached)")
    assert cache_entries(cache) == []
    assert index_server.count(wheel.name) == 1  # a hash mismatch is not retried
    # The pin still wins later: correct bytes are accepted, never the changed ones.
    assert cache.fetch(url_of(index_server, wheel), expected_sha256=pinned).sha256 == pinned


def test_size_that_differs_from_the_pin_stops_before_the_body(
        index_server: IndexServer, wheel: Path, cache: DownloadCache) -> None:
    size = wheel.stat().st_size
    with pytest.raises(HashMismatch, match=f"server sends {size} bytes, the pin says {size - 1}"
                                           r" \(the file changed upstream\)$"):
        cache.fetch(url_of(index_server, wheel), expected_size=size - 1)
    assert index_server.count(wheel.name) == 1
    assert cache_entries(cache) == []


def test_ctrl_c_during_download_leaves_no_partial_file(index_server: IndexServer, wheel: Path,
                                                       cache: DownloadCache) -> None:
    seen: list[tuple[int, int | None]] = []

    def interrupt(done: int, total: int | None) -> None:
        seen.append((done, total))
        if done >= 1 << 20:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cache.fetch(url_of(index_server, wheel), progress=interrupt)
    assert seen and seen[-1][1] == wheel.stat().st_size
    assert cache_entries(cache) == []
    assert index_server.count(wheel.name) == 1  # an interrupt is never retried


def test_progress_reports_bytes_and_total(index_server: IndexServer, wheel: Path,
                                          cache: DownloadCache) -> None:
    seen: list[tuple[int, int | None]] = []
    cache.fetch(url_of(index_server, wheel), progress=lambda d, t: seen.append((d, t)))
    size = wheel.stat().st_size
    assert len(seen) >= 3  # streamed in chunks, not read in one go
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1] == (size, size)


def test_file_urls_are_fetched_and_hashed(tmp_path: Path, cache: DownloadCache) -> None:
    wheel = make_wheel(tmp_path / "mirror dir", "triton", "3.4.0+rocm7.0.2.gitf9e5bf54")
    cached = cache.fetch(wheel.as_uri(), expected_sha256=sha256_of(wheel))
    assert cached.filename == wheel.name and cached.sha256 == sha256_of(wheel)
    with pytest.raises(DownloadError, match=r"download file://.*/absent\.whl: No such file"):
        cache.fetch((tmp_path / "absent.whl").as_uri())
    assert cache_entries(cache) == [cached.path]


def test_any_url_with_an_explicit_filename(index_server: IndexServer,
                                           cache: DownloadCache) -> None:
    tarball = index_server.directory / "libfabric-2.3.1.tar.bz2"
    tarball.write_bytes(os.urandom(100_000))
    cached = cache.fetch(index_server.url_for(tarball.name))
    assert cached.filename == "libfabric-2.3.1.tar.bz2"
    assert cached.sha256 == sha256_of(tarball)
    with pytest.raises(DownloadError, match="the URL names no file; pass filename="):
        cache.fetch(index_server.url)
    named = cache.fetch(index_server.url_for(tarball.name), filename="src.tar.bz2")
    assert named.filename == "src.tar.bz2"


def test_link_into_a_find_links_directory(index_server: IndexServer, wheel: Path,
                                          cache: DownloadCache, tmp_path: Path) -> None:
    cached = cache.fetch(url_of(index_server, wheel))
    links = tmp_path / "find-links"

    linked = cached.link_into(links)
    assert linked == links / wheel.name
    assert linked.read_bytes() == wheel.read_bytes()
    assert os.path.samefile(linked, cached.path)  # a hardlink on one filesystem
    assert cached.link_into(links) == linked  # idempotent

    (links / "other.whl").write_bytes(b"stale")
    assert os.path.samefile(cached.link_into(links, "other.whl"), cached.path)  # replaced
    assert sorted(p.name for p in links.iterdir()) == sorted([wheel.name, "other.whl"])


def test_damaged_cache_entry_is_fetched_again(index_server: IndexServer, wheel: Path,
                                              cache: DownloadCache) -> None:
    first = cache.fetch(url_of(index_server, wheel))
    first.path.chmod(0o644)
    first.path.write_bytes(b"short")
    again = cache.fetch(first.url, expected_sha256=first.sha256, expected_size=first.size)
    assert again.path.read_bytes() == wheel.read_bytes()
    assert index_server.count(wheel.name) == 2


def test_stale_temporary_files_are_swept(index_server: IndexServer, wheel: Path,
                                         cache: DownloadCache) -> None:
    stale = cache.root / "tmp" / ".torch.whl.abc.part"
    fresh = cache.root / "tmp" / ".torch.whl.def.part"  # perhaps another process's download
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"x")
    fresh.write_bytes(b"x")
    old = time.time() - 3 * 24 * 3600
    os.utime(stale, (old, old))
    cache.fetch(url_of(index_server, wheel))
    assert not stale.exists() and fresh.exists()


def test_default_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IMAGEBUILD_CACHE", str(tmp_path / "c"))
    assert DownloadCache().root == tmp_path / "c"
    assert default_cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/imagebuild")
    assert default_cache_root({}) == Path.home() / ".cache" / "imagebuild"


def test_bad_sha256_argument(cache: DownloadCache) -> None:
    with pytest.raises(ValueError, match="not a sha256 hex digest"):
        cache.fetch("http://127.0.0.1:9/x.whl", expected_sha256="abc")
