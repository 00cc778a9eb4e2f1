"""build_image at the engine seam: logs, errors, retries, tagging, interruption."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.engine.build import (
    SITE_CA_SECRET_ID,
    RetryPolicy,
    build_image,
    resolve_site_ca,
)
from imagebuild.engine.push import push_image, registry_reference
from imagebuild.errors import BuildError, EngineError
from tests.engine.conftest import DOCKERFILES, captured
from tests.engine.fakes import ReplayEngine

FAST = RetryPolicy(attempts=3, wait_initial_s=0, wait_max_s=0)
MULTISTAGE = DOCKERFILES / "multistage"


def build(engine, tmp_path: Path, **kwargs):
    return build_image(engine, MULTISTAGE / "Dockerfile", MULTISTAGE, ["imagebuild/test:abc"],
                       log_path=tmp_path / "logs" / "build.log", retry=FAST, **kwargs)


def test_success_tags_only_the_requested_tags_and_logs_everything(tmp_path):
    engine = ReplayEngine([(captured("buildkit-ok.log"), 0)])
    events = []
    image = build(engine, tmp_path, progress=events.append, labels={"imagebuild.hash": "abc"})
    assert image.ref == "imagebuild/test:abc" and image.tags == ("imagebuild/test:abc",)
    assert engine.images == {"imagebuild/test:abc": image.image_id}
    assert image.image_id.startswith("sha256:")
    request = engine.requests[0]
    assert request.tags == ()  # the engine builds untagged; tags come after success
    assert request.labels == {"imagebuild.hash": "abc"} and request.network == "host"
    log = (tmp_path / "logs" / "build.log").read_text()
    assert "#11 naming to docker.io/imagebuild-test/capture:ok done" in log
    assert "attempt 1/3 with replay engine" in log
    assert f"built {image.image_id}, tagged imagebuild/test:abc" in log
    assert {e.kind for e in events} == {"step", "done"}


def test_failure_names_the_step_with_its_tail_and_the_log(tmp_path):
    engine = ReplayEngine([(captured("buildkit-failing.log"), 1)])
    with pytest.raises(BuildError) as caught:
        build(engine, tmp_path)
    error = caught.value
    assert error.step.startswith("broken 1/2: RUN for i in 1 2 3")
    assert error.log_tail.splitlines()[-1] == "error: the answer is not 42"
    assert len(error.log_tail.splitlines()) == 25
    assert error.log_path == tmp_path / "logs" / "build.log"
    assert "exit code: 1" in str(error).splitlines()[0]
    assert len(engine.requests) == 1  # deterministic: not retried
    assert engine.images == {}


def test_transient_failure_is_retried_then_succeeds(tmp_path):
    engine = ReplayEngine([(captured("buildkit-registry-refused.log"), 1),
                           (captured("buildkit-ok.log"), 0)])
    image = build(engine, tmp_path)
    assert len(engine.requests) == 2 and image.tags == ("imagebuild/test:abc",)
    log = (tmp_path / "logs" / "build.log").read_text()
    assert "transient failure" in log and "attempt 2/3" in log


def test_transient_failure_gives_up_after_the_bounded_attempts(tmp_path):
    engine = ReplayEngine([(captured("buildkit-registry-refused.log"), 1)] * 3)
    with pytest.raises(BuildError) as caught:
        build(engine, tmp_path)
    assert len(engine.requests) == 3
    assert "(after 3 attempts)" in str(caught.value)
    assert caught.value.step == "[internal] load metadata for 127.0.0.1:5999/nothing/here:1"


def test_failure_before_any_step_still_explains(tmp_path):
    engine = ReplayEngine([(captured("buildkit-syntax-error.log"), 1)])
    with pytest.raises(BuildError) as caught:
        build(engine, tmp_path)
    assert caught.value.step is None
    assert "unknown instruction: RUNN" in str(caught.value)


def test_tls_trust_failure_suggests_the_site_ca(tmp_path):
    lines = captured("buildkit-failing.log")[:-7] + [
        ("#6 0.9 WARNING: Retrying ... SSLError(SSLCertVerificationError(1, '[SSL: "
        "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in "
        "certificate chain'))"),
        "#6 ERROR: executor failed running [/bin/sh -c pip install x]: exit code: 1"]
    with pytest.raises(BuildError) as caught:
        build(ReplayEngine([(lines, 1)]), tmp_path)
    assert "--site-ca PATH" in str(caught.value)


def test_interrupt_leaves_no_tag_and_says_so_in_the_log(tmp_path):
    def interrupt():
        raise KeyboardInterrupt

    engine = ReplayEngine([(captured("buildkit-timed.log")[:20], 0)], during_build=interrupt)
    with pytest.raises(KeyboardInterrupt):
        build(engine, tmp_path)
    assert engine.images == {}
    assert "interrupted" in (tmp_path / "logs" / "build.log").read_text()


def test_secrets_and_build_args_reach_the_engine(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    engine = ReplayEngine([(captured("buildkit-ok.log"), 0)])
    build(engine, tmp_path, secrets={SITE_CA_SECRET_ID: ca}, build_args={"RUN_ID": "x"},
          target="final", no_cache=True)
    request = engine.requests[0]
    assert request.secrets == {"site-ca": ca.resolve()}
    assert request.build_args == {"RUN_ID": "x"}
    assert request.target == "final" and request.no_cache


def test_inputs_are_checked_before_the_engine_runs(tmp_path):
    engine = ReplayEngine([])
    with pytest.raises(BuildError, match="Dockerfile not found"):
        build_image(engine, tmp_path / "nope", MULTISTAGE, [], log_path=tmp_path / "l")
    with pytest.raises(BuildError, match="build secret site-ca"):
        build(engine, tmp_path, secrets={"site-ca": tmp_path / "missing.pem"})
    with pytest.raises(EngineError, match="--builder farm: only valid with the docker backend"):
        build(engine, tmp_path, builder="farm")
    assert engine.requests == []


def test_site_ca_from_flag_or_environment(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("pem")
    assert resolve_site_ca(None, environ={}) is None
    assert resolve_site_ca(None, environ={"IMAGEBUILD_SITE_CA": str(ca)}) == ca.resolve()
    assert resolve_site_ca(str(ca), environ={"IMAGEBUILD_SITE_CA": "/nope"}) == ca.resolve()
    with pytest.raises(BuildError, match="IMAGEBUILD_SITE_CA /nope: expected a non-empty PEM"):
        resolve_site_ca(None, environ={"IMAGEBUILD_SITE_CA": "/nope"})


@pytest.mark.parametrize(("ref", "registry", "expected"), [
    ("imagebuild/rocm:7.0.2-abc", "127.0.0.1:5000", "127.0.0.1:5000/imagebuild/rocm:7.0.2-abc"),
    ("rocm:1", "registry.example.org/team/", "registry.example.org/team/rocm:1"),
    ("old.registry.io/imagebuild/rocm:1", "localhost:5000", "localhost:5000/imagebuild/rocm:1"),
])
def test_registry_reference(ref, registry, expected):
    assert registry_reference(ref, registry) == expected


def test_push_tags_for_the_registry_and_reports_digests(tmp_path):
    engine = ReplayEngine([(captured("buildkit-ok.log"), 0)])
    image = build(engine, tmp_path)
    pushed = push_image(engine, image, "127.0.0.1:5000", retry=FAST)
    assert [p.ref for p in pushed] == ["127.0.0.1:5000/imagebuild/test:abc"]
    assert pushed[0].pinned == "127.0.0.1:5000/imagebuild/test@sha256:" + "ab" * 32
    assert engine.images["127.0.0.1:5000/imagebuild/test:abc"] == image.image_id


def test_push_retries_transient_errors_only(tmp_path):
    engine = ReplayEngine([(captured("buildkit-ok.log"), 0)])
    image = build(engine, tmp_path)
    failures = [EngineError("docker push x failed: received unexpected HTTP status: "
                            "503 Service Unavailable")]

    def flaky_push(ref):
        if failures:
            raise failures.pop()
        return "sha256:" + "cd" * 32

    engine.push = flaky_push
    assert push_image(engine, image, "127.0.0.1:5000", retry=FAST)[0].digest.endswith("cd")

    def denied(ref):
        raise EngineError("docker push x failed: denied: requested access to the resource")

    engine.push = denied
    with pytest.raises(EngineError, match="denied"):
        push_image(engine, image, "127.0.0.1:5000", retry=FAST)


@pytest.mark.parametrize("capture", ["buildkit-failing.log", "podman-failing.log"])
def test_a_failed_builds_error_names_the_command_once_and_stays_short(
        capture: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the CLI prints for a failed build: the message with the exit code, the failing
    step, the step's output tail and the log's path; the RUN line (a ROCm one is ~1,000
    characters, each engine repeats it in its error) once, cut short."""
    from imagebuild.cli import report_error

    short = ('for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 '
             '28 29 30; do echo "compile line $i"; done; echo "error: the answer is not 42" '
             '>&2; false')
    long = ("cmake -S /src/hipBLASLt -B /build "
            + " ".join(f"-DOPTION_{i}=ON" for i in range(60)) + " && " + short)
    lines = [line.replace(short, long) for line in captured(capture)]
    assert sum(long in line for line in lines) >= 2  # the engine's own text repeats it
    engine = ReplayEngine([(lines, 1)])
    if capture.startswith("podman"):  # read as podman's output is read
        engine.backend, engine.progress_format = "podman", "podman"
    with pytest.raises(BuildError) as caught:
        build(engine, tmp_path)
    report_error(caught.value)
    err = capsys.readouterr().err
    printed = err.splitlines()
    assert printed[0] == (
        "error: image build failed with docker: the command failed (exit code: 1)"
        if capture.startswith("buildkit") else
        "error: image build failed with podman: the command failed (exit status 1)")
    assert printed[1].startswith("  failing step: ") and "-DOPTION_0=ON" in printed[1]
    assert printed[-2:] == ["  error: the answer is not 42",
                            f"  full log: {tmp_path / 'logs' / 'build.log'}"]
    assert err.count("-DOPTION_0=ON") == 1  # the command once, on the step's line
    assert len(printed) <= 2 + 25 + 1 and max(map(len, printed)) <= 220
    assert len(err) < 1500
