"""resolve_image_digest against a real HTTP server on 127.0.0.1 shaped like a registry:
plain answers, Docker Hub-style token auth, HEAD-less registries, 5xx and resets."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from imagebuild.errors import SourceError
from imagebuild.http import HttpClient, HttpPolicy
from imagebuild.lock.registry import ImageName, resolve_image_digest

FAST = HttpClient(policy=HttpPolicy(retries=2, backoff=0))
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType":
                       "application/vnd.oci.image.index.v1+json", "manifests": []}).encode()
DIGEST = "sha256:" + hashlib.sha256(MANIFEST).hexdigest()


class Registry:
    """Behaviour switches read by the handler; requests are recorded."""

    def __init__(self):
        self.token_auth = False
        self.head_allowed = True
        self.send_digest_header = True
        self.failures: list[int] = []  # HTTP statuses to answer first, one per request
        self.stall_s = 0.0  # seconds to wait before answering a manifest request
        self.requests: list[tuple[str, str, dict]] = []


@pytest.fixture
def registry() -> Iterator[tuple[Registry, str]]:
    state = Registry()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

        def _answer(self, with_body: bool):
            state.requests.append((self.command, self.path, dict(self.headers)))
            if self.path.startswith("/token"):
                return self._send(200, json.dumps({"token": "t0k"}).encode(), with_body)
            if state.stall_s:
                time.sleep(state.stall_s)
            if state.failures:
                return self._send(state.failures.pop(0), b"busy", with_body)
            if state.token_auth and self.headers.get("Authorization") != "Bearer t0k":
                host = self.headers["Host"]
                return self._send(401, b"", with_body, {"WWW-Authenticate": (
                    f'Bearer realm="http://{host}/token",service="registry.test",'
                    'scope="repository:library/debian:pull"')})
            if self.command == "HEAD" and not state.head_allowed:
                return self._send(405, b"", with_body)
            if self.path == "/v2/library/debian/manifests/bookworm":
                headers = {"Content-Type": "application/vnd.oci.image.index.v1+json"}
                if state.send_digest_header:
                    headers["Docker-Content-Digest"] = DIGEST
                return self._send(200, MANIFEST, with_body, headers)
            return self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', with_body)

        def _send(self, status, body, with_body, headers=None):
            try:
                self._write(status, body, with_body, headers)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                pass

        def _write(self, status, body, with_body, headers):
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if with_body:
                self.wfile.write(body)

        def do_GET(self):
            self._answer(True)

        def do_HEAD(self):
            self._answer(False)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state, f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_plain_registry_head_with_digest_header(registry):
    state, host = registry
    assert resolve_image_digest(f"{host}/library/debian:bookworm", http=FAST) == DIGEST
    method, path, headers = state.requests[0]
    assert (method, path) == ("HEAD", "/v2/library/debian/manifests/bookworm")
    # an index must be asked for, or the registry would answer a single-arch manifest
    assert "application/vnd.oci.image.index.v1+json" in headers["Accept"]
    assert "application/vnd.docker.distribution.manifest.list.v2+json" in headers["Accept"]


def test_bearer_token_challenge_is_answered(registry):
    state, host = registry
    state.token_auth = True
    assert resolve_image_digest(f"{host}/library/debian:bookworm", http=FAST) == DIGEST
    token_request = next(r for r in state.requests if r[1].startswith("/token"))
    assert "scope=repository%3Alibrary%2Fdebian%3Apull" in token_request[1]
    assert "service=registry.test" in token_request[1]


def test_without_head_or_digest_header_the_body_is_hashed(registry):
    state, host = registry
    state.head_allowed = False
    state.send_digest_header = False
    assert resolve_image_digest(f"{host}/library/debian:bookworm", http=FAST) == DIGEST
    assert [r[0] for r in state.requests] == ["HEAD", "GET"]


def test_server_errors_are_retried(registry):
    state, host = registry
    state.failures = [503, 502]
    assert resolve_image_digest(f"{host}/library/debian:bookworm", http=FAST) == DIGEST
    assert len(state.requests) == 3


def test_persistent_server_errors_end_in_a_source_error(registry):
    state, host = registry
    state.failures = [500] * 10
    with pytest.raises(SourceError, match=r"unreachable after 3 attempts: HTTP 500"):
        resolve_image_digest(f"{host}/library/debian:bookworm", http=FAST)


def test_default_client_takes_its_retries_from_the_environment(registry, monkeypatch):
    state, host = registry
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "1")
    state.failures = [503]
    assert resolve_image_digest(f"{host}/library/debian:bookworm") == DIGEST
    assert len(state.requests) == 2

    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "0")
    state.requests.clear()
    state.failures = [503]
    with pytest.raises(SourceError, match=r"unreachable after 1 attempt: HTTP 503 from HEAD"):
        resolve_image_digest(f"{host}/library/debian:bookworm")
    assert len(state.requests) == 1


def test_default_client_takes_its_timeout_from_the_environment(registry, monkeypatch):
    state, host = registry
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "0")
    monkeypatch.setenv("IMAGEBUILD_HTTP_TIMEOUT", "2,0.3")
    state.stall_s = 2.0
    started = time.monotonic()
    with pytest.raises(SourceError, match=r"unreachable after 1 attempt: .*Read timed out"):
        resolve_image_digest(f"{host}/library/debian:bookworm")
    # the default read timeout is 60 s: only the environment's 0.3 s ends it this soon
    assert time.monotonic() - started < 1.5
    assert len(state.requests) == 1


def test_unknown_tag_is_a_source_error_and_not_retried(registry):
    state, host = registry
    with pytest.raises(SourceError, match=r"tag trixie not found in 127\.0\.0\.1:\d+/library/"
                                          r"debian \(HTTP 404\)"):
        resolve_image_digest(f"{host}/library/debian:trixie", http=FAST)
    assert len(state.requests) == 1


def test_unreachable_registry_is_a_source_error():
    with pytest.raises(SourceError, match="registry 127.0.0.1:9 unreachable after 2 attempts"):
        resolve_image_digest("127.0.0.1:9/x/y:1", http=HttpClient(policy=HttpPolicy(
            retries=1, connect_timeout=2, read_timeout=2, backoff=0)))


def test_a_pinned_reference_needs_no_registry():
    pinned = "rocm/dev-ubuntu-24.04@sha256:" + "1" * 64
    assert resolve_image_digest(pinned) == "sha256:" + "1" * 64


@pytest.mark.parametrize(("ref", "expected"), [
    ("debian:bookworm", ("docker.io", "library/debian", "bookworm", None)),
    ("rocm/dev-ubuntu-24.04:7.0.2", ("docker.io", "rocm/dev-ubuntu-24.04", "7.0.2", None)),
    ("ubuntu", ("docker.io", "library/ubuntu", "latest", None)),
    ("localhost:5000/x/y", ("localhost:5000", "x/y", "latest", None)),
    ("ghcr.io/org/img:1@sha256:" + "a" * 64, ("ghcr.io", "org/img", "1", "sha256:" + "a" * 64)),
])
def test_reference_normalization(ref, expected):
    name = ImageName.parse(ref)
    assert (name.registry, name.repository, name.tag, name.digest) == expected


def test_docker_hub_uses_its_registry_host_over_https():
    assert ImageName.parse("rocm/pytorch:latest").api_base == "https://registry-1.docker.io/v2"
    assert ImageName.parse("127.0.0.1:5000/a:b").api_base == "http://127.0.0.1:5000/v2"


@pytest.mark.parametrize("ref", ["UPPER/case:1", "x@sha256:short", "bad name:1"])
def test_invalid_references(ref):
    with pytest.raises(SourceError):
        ImageName.parse(ref)
