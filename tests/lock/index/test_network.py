"""Retry policy against a real server: what is retried, how often, and how failures read."""

from __future__ import annotations

import pytest

from imagebuild.errors import ImagebuildError, WheelIndexError
from imagebuild.http import HttpClient, HttpPolicy
from imagebuild.lock.index import WheelIndex
from tests.lock.index.conftest import FAST, READ_TIMEOUT, RETRIES
from tests.support.indexserver import Fault, IndexServer, unused_port_url

ATTEMPTS = RETRIES + 1


def listing(server: IndexServer) -> WheelIndex:
    return WheelIndex(server.url, **FAST)


def test_503_then_success_is_retried(rocm_index: IndexServer,
                                     caplog: pytest.LogCaptureFixture) -> None:
    rocm_index.inject("/", Fault.http_status(503, times=2))
    with caplog.at_level("WARNING", logger="imagebuild.http"):
        assert listing(rocm_index).files()
    assert [r.status for r in rocm_index.requests_for("/")] == [503, 503, 200]
    # each retry is said as it happens (a dead index must not look like a hung command)
    said = [r.getMessage() for r in caplog.records if r.name == "imagebuild.http"]
    assert len(said) == 2
    assert said[0].startswith(f"wheel index {rocm_index.url}: HTTP 503 Service Unavailable; "
                              f"retry 1 of {RETRIES} in ")


@pytest.mark.parametrize("fault", [Fault.reset(), Fault.stall(5 * READ_TIMEOUT)],
                         ids=["reset", "stall"])
def test_reset_or_stall_then_success_is_retried(rocm_index: IndexServer, fault: Fault) -> None:
    rocm_index.inject("/", fault)
    assert listing(rocm_index).files()
    assert [r.fault for r in rocm_index.requests_for("/")] == [fault.kind, None]


@pytest.mark.parametrize(("fault", "reason"), [
    (Fault.http_status(503, times=None), "HTTP 503 Service Unavailable"),
    (Fault.http_status(502, times=None), "HTTP 502 Bad Gateway"),
    (Fault.reset(times=None), "connection reset by peer"),
    (Fault.stall(5 * READ_TIMEOUT, times=None), f"no data for {READ_TIMEOUT:g}s (read timeout)"),
], ids=["503", "502", "reset", "stall"])
def test_persistent_fault_fails_clearly_after_bounded_attempts(
        rocm_index: IndexServer, fault: Fault, reason: str) -> None:
    rocm_index.inject("/", fault)
    with pytest.raises(WheelIndexError) as caught:
        listing(rocm_index).files()
    assert str(caught.value) == (
        f"wheel index {rocm_index.url}: {reason} after {ATTEMPTS} attempts")
    assert rocm_index.count("/") == ATTEMPTS


@pytest.mark.parametrize(("status", "reason"), [(404, "Not Found"), (403, "Forbidden"),
                                                (410, "Gone")])
def test_client_errors_are_not_retried(rocm_index: IndexServer, status: int,
                                       reason: str) -> None:
    rocm_index.inject("/", Fault.http_status(status, times=None))
    with pytest.raises(WheelIndexError) as caught:
        listing(rocm_index).files()
    assert str(caught.value) == (
        f"wheel index {rocm_index.url}: HTTP {status} {reason} (not retried)")
    assert rocm_index.count("/") == 1


def test_missing_directory_on_the_server_is_a_404(rocm_index: IndexServer) -> None:
    with pytest.raises(WheelIndexError, match=r"rocm-rel-9\.9\.9/: HTTP 404 Not Found"):
        WheelIndex(rocm_index.url + "rocm-rel-9.9.9/", **FAST).files()
    assert rocm_index.count() == 1


def test_dead_server_is_a_clean_error() -> None:
    url = unused_port_url()
    with pytest.raises(WheelIndexError) as caught:
        WheelIndex(url, **FAST).files()
    assert str(caught.value) == f"wheel index {url}: connection refused after {ATTEMPTS} attempts"
    assert caught.value.__cause__ is not None  # the requests error stays for debugging


def test_retries_from_the_environment(rocm_index: IndexServer,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGEBUILD_HTTP_RETRIES", "0")
    rocm_index.inject("/", Fault.http_status(503, times=1))
    with pytest.raises(WheelIndexError, match="HTTP 503 Service Unavailable$"):
        WheelIndex(rocm_index.url, timeout=(2.0, READ_TIMEOUT), backoff=0).files()
    assert rocm_index.count("/") == 1


def test_timeout_from_the_environment(rocm_index: IndexServer,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGEBUILD_HTTP_TIMEOUT", "2,0.2")
    rocm_index.inject("/", Fault.stall(2.0, times=None))
    with pytest.raises(WheelIndexError, match=r"no data for 0\.2s \(read timeout\) after 2"):
        WheelIndex(rocm_index.url, retries=1, backoff=0).files()


def test_policy_resolution_order() -> None:
    env = {"IMAGEBUILD_HTTP_RETRIES": "7", "IMAGEBUILD_HTTP_TIMEOUT": "15"}
    assert HttpPolicy.resolve(environ=env) == HttpPolicy(
        retries=7, connect_timeout=15, read_timeout=15)
    assert HttpPolicy.resolve(retries=1, timeout=(3, 4), backoff=0.5, environ=env) == HttpPolicy(
        retries=1, connect_timeout=3, read_timeout=4, backoff=0.5)
    assert HttpPolicy.resolve(environ={}) == HttpPolicy()
    assert HttpPolicy().attempts == 5


@pytest.mark.parametrize(("key", "value"), [("IMAGEBUILD_HTTP_RETRIES", "-1"),
                                            ("IMAGEBUILD_HTTP_RETRIES", "many"),
                                            ("IMAGEBUILD_HTTP_TIMEOUT", "0"),
                                            ("IMAGEBUILD_HTTP_TIMEOUT", "1,2,3"),
                                            ("IMAGEBUILD_HTTP_TIMEOUT", "soon")])
def test_bad_environment_values_are_named(key: str, value: str) -> None:
    with pytest.raises(ImagebuildError, match=f"environment {key}='{value}': expected"):
        HttpPolicy.resolve(environ={key: value})


def test_backoff_grows_exponentially(rocm_index: IndexServer) -> None:
    waits: list[float] = []
    client = HttpClient(policy=HttpPolicy(retries=3, backoff=1.0, read_timeout=READ_TIMEOUT),
                        sleep=waits.append)  # record the waits instead of sleeping
    rocm_index.inject("/", Fault.http_status(503, times=3))
    client.get_text(rocm_index.url)
    assert len(waits) == 3
    for n, wait in enumerate(waits):  # initial * 2**n plus up to one initial of jitter
        assert 2**n <= wait <= 2**n + 1
