"""Real builds on the real engines (Docker with BuildKit, podman) and the real registry.

Base images come from debootstrap (testbed/base_images.py), never from Docker Hub.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import requests

from imagebuild.engine.base import Engine
from imagebuild.engine.build import (
    SITE_CA_SECRET_ID,
    RetryPolicy,
    build_image,
)
from imagebuild.engine.progress import BuildEvent
from imagebuild.engine.push import push_image
from imagebuild.errors import BuildError, SourceError
from imagebuild.lock.registry import resolve_image_digest
from testbed.base_images import REPO_ROOT
from tests.engine.conftest import DOCKERFILES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MULTISTAGE = DOCKERFILES / "multistage"
FAST = RetryPolicy(attempts=2, wait_initial_s=0, wait_max_s=0)


@pytest.fixture(params=["docker", "podman"])
def engine_and_base(request) -> tuple[Engine, str]:
    """Each build test runs on both backends, each with the base image in its own store."""
    if request.param == "docker":
        request.applymarker(pytest.mark.docker)
        return request.getfixturevalue("docker_engine"), request.getfixturevalue("base_image")
    return request.getfixturevalue("podman_engine"), request.getfixturevalue("podman_base_image")


@pytest.fixture
def run_id() -> str:
    return uuid.uuid4().hex[:12]


@pytest.fixture
def site_ca(tmp_path: Path, run_id: str) -> tuple[Path, str]:
    """A secret whose bytes are unique to this test, to hunt for in the image afterwards."""
    token = f"SITE-CA-SECRET-{run_id}-{uuid.uuid4().hex}"
    path = tmp_path / "site-ca.pem"
    path.write_text(f"-----BEGIN CERTIFICATE-----\n{token}\n-----END CERTIFICATE-----\n")
    return path, token


@pytest.fixture
def cleanup(engine_and_base):
    """Tags the test created, removed afterwards."""
    engine, _ = engine_and_base
    refs: list[str] = []
    yield refs
    for ref in refs:
        engine.remove(ref)


def image_bytes(engine: Engine, ref: str, tmp_path: Path) -> bytes:
    """The whole image as `save` writes it: every layer tar and the config (history)."""
    out = tmp_path / "image.tar"
    binary = getattr(engine, "binary", engine.backend)
    subprocess.run([binary, "save", "-o", str(out), ref], check=True, capture_output=True)
    return out.read_bytes()


def build_multistage(engine, base, run_id, site_ca, tmp_path, tag, events=None):
    return build_image(
        engine, MULTISTAGE / "Dockerfile", MULTISTAGE, [tag],
        build_args={"BASE": base, "RUN_ID": run_id},
        secrets={SITE_CA_SECRET_ID: site_ca[0]},
        labels={"imagebuild.test-run": run_id},
        log_path=tmp_path / f"build-{run_id}.log",
        progress=events.append if events is not None else None, retry=FAST)


def test_multistage_build_with_cache_mount_and_secret(engine_and_base, run_id, site_ca,
                                                      tmp_path, cleanup):
    engine, base = engine_and_base
    tag = f"imagebuild-test/multistage:{run_id}"
    cleanup.append(tag)
    events: list[BuildEvent] = []
    image = build_multistage(engine, base, run_id, site_ca, tmp_path, tag, events)

    assert image.ref == tag and engine.image_exists(tag)
    assert engine.image_id(tag) == image.image_id
    assert engine.image_labels(tag)["imagebuild.test-run"] == run_id
    result = engine.run(tag, ["sh", "-c", ("cat /opt/result/secret-sha256 "
                              "/opt/result/payload.txt /opt/result/python-version")])
    assert result.exit_code == 0, result.output
    secret_sha, payload, python = result.output.splitlines()
    # the secret was readable at build time ...
    assert secret_sha == hashlib.sha256(site_ca[0].read_bytes()).hexdigest()
    assert payload == "payload from the build context"
    assert python == "(3, 11)"
    # ... and is in no layer, no config, no history
    assert site_ca[1].encode() not in image_bytes(engine, tag, tmp_path)
    assert {e.stage for e in events if e.kind == "step" and e.step} >= {"builder", "final"}
    log = (tmp_path / f"build-{run_id}.log").read_text()
    assert site_ca[1] not in log


def test_rebuild_is_fully_cached_and_the_cache_mount_persists(engine_and_base, run_id,
                                                              site_ca, tmp_path, cleanup):
    engine, base = engine_and_base
    first, again, other = (f"imagebuild-test/multistage:{run_id}-{n}" for n in "abc")
    cleanup.extend([first, again, other])
    image = build_multistage(engine, base, run_id, site_ca, tmp_path, first)

    events: list[BuildEvent] = []
    rebuilt = build_multistage(engine, base, run_id, site_ca, tmp_path, again, events)
    assert rebuilt.image_id == image.image_id
    build_steps = {e.step_id for e in events if e.kind == "step" and e.step
                   and not e.instruction.startswith(("FROM", "ARG", "LABEL"))}
    cached = {e.step_id for e in events if e.kind == "cached"}
    assert build_steps and build_steps <= cached, "every RUN/COPY step is cached"

    # a new RUN_ID re-runs the cache-mount step, which sees the first run's file
    build_multistage(engine, base, run_id + "x", site_ca, tmp_path, other)
    listing = engine.run(other, ["cat", "/opt/result/cache-listing"]).output.split()
    assert f"run-{run_id}" in listing


def test_failing_step_is_named_with_its_output_and_leaves_no_tag(engine_and_base, run_id,
                                                                 tmp_path, cleanup):
    engine, base = engine_and_base
    tag = f"imagebuild-test/failing:{run_id}"
    cleanup.append(tag)
    log_path = tmp_path / "failing.log"
    started = time.monotonic()
    with pytest.raises(BuildError) as caught:
        build_image(engine, DOCKERFILES / "failing" / "Dockerfile", DOCKERFILES / "failing",
                    [tag], build_args={"BASE": base, "RUN_ID": run_id}, log_path=log_path,
                    retry=RetryPolicy(attempts=3, wait_initial_s=30))
    assert time.monotonic() - started < 25, "a deterministic failure must not be retried"
    error = caught.value
    assert "broken" in error.step and "RUN for i in 1 2 3" in error.step
    tail = error.log_tail.splitlines()
    # stdout and stderr reach the engine on separate pipes: their relative order varies
    assert "error: the answer is not 42" in tail and "compile line 30" in tail
    assert "compile line 5" not in tail and len(tail) <= 27  # 25 + an earlier error line
    assert error.log_path == log_path and "compile line 1" in log_path.read_text()
    assert not engine.image_exists(tag)


@pytest.mark.docker
def test_transient_pull_failure_is_retried_then_reported(docker_engine, tmp_path):
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text("FROM 127.0.0.1:5999/nothing/here:1\nRUN true\n")
    log_path = tmp_path / "refused.log"
    with pytest.raises(BuildError) as caught:
        build_image(docker_engine, context / "Dockerfile", context, ["imagebuild-test/x:1"],
                    log_path=log_path, retry=FAST)
    assert "(after 2 attempts)" in str(caught.value)
    assert "connection refused" in str(caught.value)
    log = log_path.read_text()
    assert "attempt 1/2" in log and "attempt 2/2" in log and "retrying" in log


INTERRUPT_SCRIPT = textwrap.dedent("""
    import signal
    import sys
    from pathlib import Path
    from imagebuild.engine.build import build_image
    from imagebuild.engine.select import open_engine

    # Ctrl-C in a terminal: even when the suite itself was started with SIGINT ignored (a
    # background job of a shell without job control), which Python then leaves ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    backend, context, tag, run_id, base, log = sys.argv[1:]
    try:
        build_image(open_engine(backend), Path(context) / "Dockerfile", Path(context), [tag],
                    build_args={"BASE": base, "RUN_ID": run_id},
                    labels={"imagebuild.test-run": run_id}, log_path=Path(log))
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(0)
""")


def processes_mentioning(marker: str) -> list[int]:
    """Processes whose command line or environment holds ``marker`` (RUN sees build args)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                if marker.encode() in (proc / part).read_bytes():
                    found.append(int(proc.name))
                    break
            except OSError:
                continue
    return found


def test_interrupt_stops_the_build_and_leaves_no_tag(engine_and_base, run_id, tmp_path,
                                                     cleanup):
    engine, base = engine_and_base
    tag = f"imagebuild-test/slow:{run_id}"
    cleanup.append(tag)
    log_path = tmp_path / "slow.log"
    proc = subprocess.Popen(
        [sys.executable, "-c", INTERRUPT_SCRIPT, engine.backend, str(DOCKERFILES / "slow"), tag,
         run_id, base, str(log_path)], cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while f"started {run_id}" not in (log_path.read_text() if log_path.exists() else ""):
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the slow build never started its RUN step"
            time.sleep(0.2)
        assert processes_mentioning(f"RUN_ID={run_id}"), "the RUN step should be running"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130, proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()  # reaps it and closes its output pipe
    assert not engine.image_exists(tag)
    assert "interrupted" in log_path.read_text()
    # the engine cancelled the step: no process still runs with this build's RUN_ID
    deadline = time.monotonic() + 30
    while processes_mentioning(f"RUN_ID={run_id}") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not processes_mentioning(f"RUN_ID={run_id}")


def pull(engine: Engine, ref: str) -> None:
    if engine.backend == "docker":
        engine.client.images.pull(ref)
    else:
        subprocess.run([engine.binary, "pull", "--tls-verify=false", ref], check=True,
                       capture_output=True)


def test_push_to_a_real_registry_and_resolve_the_digest(engine_and_base, local_registry,
                                                        run_id, site_ca, tmp_path):
    engine, base = engine_and_base
    repository = f"imagebuild-test/pushed-{engine.backend}"
    tag = f"{repository}:{run_id}"
    image = build_multistage(engine, base, run_id, site_ca, tmp_path, tag)
    cleanup_refs = [tag, f"{local_registry}/{tag}"]
    try:
        (pushed,) = push_image(engine, image, local_registry, retry=FAST)
        cleanup_refs.append(pushed.pinned)
        assert pushed.ref == f"{local_registry}/{tag}"
        tags = requests.get(f"http://{local_registry}/v2/{repository}/tags/list",
                            timeout=10).json()["tags"]
        assert run_id in tags
        # the registry's own answer agrees with what the push reported
        assert resolve_image_digest(pushed.ref) == pushed.digest
        manifest = requests.get(
            f"http://{local_registry}/v2/{repository}/manifests/{pushed.digest}",
            headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
            timeout=10)
        assert manifest.status_code == 200
        assert "sha256:" + hashlib.sha256(manifest.content).hexdigest() == pushed.digest
        # and the image comes back from the registry by digest
        engine.remove(pushed.ref)
        pull(engine, pushed.pinned)
        assert engine.image_id(pushed.pinned) == image.image_id
    finally:
        for ref in cleanup_refs:
            engine.remove(ref)


@pytest.mark.docker
def test_build_from_a_digest_pinned_registry_base(docker_engine, registry_base_image, run_id,
                                                  site_ca, tmp_path):
    digest = resolve_image_digest(registry_base_image)
    assert digest.startswith("sha256:") and len(digest) == 71
    pinned = f"{registry_base_image.rsplit(':', 1)[0]}@{digest}"
    tag = f"imagebuild-test/pinned:{run_id}"
    try:
        image = build_multistage(docker_engine, pinned, run_id, site_ca, tmp_path, tag)
        assert docker_engine.run(image.ref, ["cat", "/opt/result/python-version"]).output \
            .strip() == "(3, 11)"
    finally:
        docker_engine.remove(tag)


@pytest.mark.docker
def test_digest_resolution_errors_against_the_real_registry(docker_engine, registry_base_image):
    name = registry_base_image.rsplit(":", 1)[0]
    with pytest.raises(SourceError, match="tag no-such-tag not found"):
        resolve_image_digest(f"{name}:no-such-tag")
