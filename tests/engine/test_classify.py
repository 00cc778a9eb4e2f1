"""Which build failures are retried: transient network/registry trouble, never a bad step."""

from __future__ import annotations

import pytest

from imagebuild.engine.build import classify_failure
from imagebuild.engine.progress import BuildLogParser
from tests.engine.conftest import captured


def failure_text(name: str, fmt: str) -> str:
    parser = BuildLogParser(fmt)  # type: ignore[arg-type]
    parser.feed_all(captured(name))
    return parser.failure().text


@pytest.mark.parametrize(("log", "fmt", "transient"), [
    ("buildkit-failing.log", "buildkit", False),        # RUN exits 1
    ("buildkit-syntax-error.log", "buildkit", False),   # unknown instruction
    ("buildkit-tag-not-found.log", "buildkit", False),  # base image tag does not exist
    ("buildkit-registry-refused.log", "buildkit", True),
    ("buildkit-no-such-host.log", "buildkit", True),
    ("podman-failing.log", "podman", False),
    ("podman-syntax-error.log", "podman", False),
    ("podman-registry-refused.log", "podman", True),
])
def test_captured_failures(log, fmt, transient):
    assert classify_failure(failure_text(log, fmt)).transient is transient


@pytest.mark.parametrize("line", [
    # registry pulls (BuildKit / containerd / podman wording)
    ('failed to resolve source metadata for docker.io/rocm/dev-ubuntu-24.04:7.0.2: failed to '
    'do request: Head "https://registry-1.docker.io/v2/rocm/dev-ubuntu-24.04/manifests/7.0.2":'
    " dial tcp 54.1.2.3:443: i/o timeout"),
    ("failed to copy: httpReadSeeker: failed open: unexpected status code "
    "https://registry-1.docker.io/v2/: 503 Service Unavailable"),
    "net/http: TLS handshake timeout",
    "read tcp 10.0.0.2:51234->104.18.1.1:443: read: connection reset by peer",
    "toomanyrequests: You have reached your pull rate limit.",
    "received unexpected HTTP status: 502 Bad Gateway",
    # index downloads
    ("pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='repo.radeon.com',"
    " port=443): Read timed out."),
    "WARNING: Connection broken: IncompleteRead(1048576 bytes read, 2097152 more expected)",
    ("error: Failed to download `torch==2.8.0+rocm7.0.2.lw.git245bf6ed`\n  Caused by: error "
    "sending request for url (https://repo.radeon.com/rocm/manylinux/rocm-rel-7.0.2/torch.whl)"),
    "E: Failed to fetch http://deb.debian.org/debian/pool/main/g/gcc.deb  Connection timed out",
    "curl: (28) Operation timed out after 30000 milliseconds with 0 bytes received",
    "fatal: early EOF",
    "Temporary failure in name resolution",
])
def test_network_trouble_is_transient(line):
    verdict = classify_failure(f"some earlier output\n{line}")
    assert verdict.transient, verdict.reason


@pytest.mark.parametrize("line", [
    "error: command 'gcc' failed: No such file or directory\nexit code: 1",
    "CMake Error at CMakeLists.txt:12 (find_package): Could not find a package configuration",
    "ERROR: Could not find a version that satisfies the requirement torch==9.9",
    "ERROR: No matching distribution found for torch==9.9",
    "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.",
    # a download-looking failure that a retry cannot fix wins over the network word
    "error: Failed to download `torch`\n  Caused by: Hash mismatch for `torch`",
    "404 Client Error: Not Found for url: https://repo.radeon.com/x.whl",
    "pull access denied for rocm/nothing, repository does not exist",
    ("failed to solve: rpc error: code = Unknown desc = failed to solve with frontend "
    "dockerfile.v0: failed to create LLB definition: dockerfile parse error line 3"),
    "SSL: CERTIFICATE_VERIFY_FAILED certificate verify failed: self-signed certificate in chain",
])
def test_deterministic_failures_are_not_retried(line):
    assert not classify_failure(line).transient


def test_the_reason_names_the_matching_line():
    verdict = classify_failure("step output\nread: connection reset by peer\nmore")
    assert verdict.reason == "read: connection reset by peer"
