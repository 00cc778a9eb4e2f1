"""The shared test server itself: faults are consumed as programmed, ranges follow RFC 9110."""

from __future__ import annotations

import requests

from tests.support.indexserver import Fault, IndexServer, make_wheel


def test_faults_are_consumed_in_order_and_logged(index_server: IndexServer) -> None:
    wheel = make_wheel(index_server.directory, "triton", "3.4.0")
    index_server.inject(wheel.name, Fault.http_status(503, times=2), Fault.not_found(times=1))
    url = index_server.url_for(wheel.name)
    statuses = [requests.get(url, timeout=5).status_code for _ in range(4)]
    assert statuses == [503, 503, 404, 200]
    log = index_server.requests_for("/" + wheel.name)
    assert [(r.method, r.fault, r.status) for r in log] == [
        ("GET", "status", 503), ("GET", "status", 503), ("GET", "status", 404),
        ("GET", None, 200)]
    assert index_server.count() == 4


def test_ranges_and_if_range(index_server: IndexServer) -> None:
    data = bytes(range(256)) * 4
    (index_server.directory / "blob.bin").write_bytes(data)
    url = index_server.url_for("blob.bin")
    head = requests.head(url, timeout=5)
    etag = head.headers["ETag"]
    assert head.headers["Accept-Ranges"] == "bytes"
    assert int(head.headers["Content-Length"]) == len(data)

    def get(range_: str, **extra: str) -> requests.Response:
        return requests.get(url, headers={"Range": range_, **extra}, timeout=5)

    assert get("bytes=10-").content == data[10:]
    middle = get("bytes=10-19")
    assert (middle.status_code, middle.content) == (206, data[10:20])
    assert middle.headers["Content-Range"] == f"bytes 10-19/{len(data)}"
    assert get("bytes=-5").content == data[-5:]
    assert get("bytes=10-", **{"If-Range": etag}).status_code == 206
    stale = get("bytes=10-", **{"If-Range": '"an-old-etag"'})
    assert (stale.status_code, stale.content) == (200, data)


def test_directories_redirect_and_traversal_is_refused(index_server: IndexServer) -> None:
    (index_server.directory / "rocm-rel-7.0.2").mkdir()
    moved = requests.get(index_server.url + "rocm-rel-7.0.2", allow_redirects=False, timeout=5)
    assert (moved.status_code, moved.headers["Location"]) == (301, "/rocm-rel-7.0.2/")
    assert requests.get(index_server.url + "%2E%2E/%2E%2E/etc/passwd",
                        timeout=5).status_code == 404
