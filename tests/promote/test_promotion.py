"""Promotion by proof against the real registry on 127.0.0.1: the tested marker on the
validated digest only, stable tags only on a marked digest, and never moved.

Each test pushes small images of its own (one layer, made here) to a repository of its
own through the registry's HTTP API, so nothing else in the registry is touched. The
validation reports are the inputs the rules judge: their summary fields are those of
``imagebuild validate`` (docs/validate-report.md).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import tarfile
import time
import uuid
from pathlib import Path

import pytest
import requests

from imagebuild.cli import main
from imagebuild.errors import PromoteError
from imagebuild.oci_registry import Reference, RegistryClient
from imagebuild.promote.proof import mark_tested, marker_tag, promote_stable, report_hash
from testbed.base_images import REGISTRY, registry_up

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def registry() -> str:
    deadline = time.monotonic() + 15
    while not registry_up():
        if time.monotonic() > deadline:
            pytest.fail(f"no registry answers on http://{REGISTRY}/v2/ (.ci/setup-system.sh "
                        "starts Debian's docker-registry there)")
        time.sleep(0.5)
    return REGISTRY


@pytest.fixture
def repo(registry: str) -> str:
    return f"{registry}/imagebuild-test/promote-{uuid.uuid4().hex[:12]}"


def _upload(repo: str, data: bytes) -> str:
    registry, name = repo.split("/", 1)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    started = requests.post(f"http://{registry}/v2/{name}/blobs/uploads/", timeout=30)
    assert started.status_code == 202, started.text
    location = started.headers["Location"]
    location = location if location.startswith("http") else f"http://{registry}{location}"
    done = requests.put(location, params={"digest": digest}, data=data, timeout=30,
                        headers={"Content-Type": "application/octet-stream"})
    assert done.status_code == 201, done.text
    return digest


def push_image(repo: str, tag: str, content: str) -> str:
    """A one-layer image holding /content; returns its manifest digest."""
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        member = tarfile.TarInfo("content")
        member.size = len(content.encode())
        archive.addfile(member, io.BytesIO(content.encode()))
    layer = gzip.compress(tar.getvalue(), mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {
        "type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar.getvalue()).hexdigest()]},
        "config": {}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _upload(repo, config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _upload(repo, layer), "size": len(layer)}]}).encode()
    registry, name = repo.split("/", 1)
    put = requests.put(f"http://{registry}/v2/{name}/manifests/{tag}", data=manifest,
                       headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                       timeout=30)
    assert put.status_code == 201, put.text
    return put.headers["Docker-Content-Digest"]


def digest_of(ref: str) -> str | None:
    parsed = Reference.parse(ref)
    return RegistryClient(parsed.registry).digest(parsed)


def report(tmp_path: Path, image: str, *, exit_code: int = 0, no_gpu: int = 0,
           complete: bool = True) -> Path:
    path = tmp_path / f"report-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({
        "image": image, "complete": complete,
        "summary": {"passed": 6 - exit_code, "failed": exit_code, "skipped": no_gpu,
                    "exit_code": exit_code, "allow_cpu": bool(no_gpu),
                    "skipped_no_gpu": no_gpu, "incomplete": not complete,
                    "failed_checks": ["gemm"] if exit_code else []}}))
    return path


def cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue() + err.getvalue()


CANONICAL = "a1b2c3d4e5f6"


def test_a_passed_run_of_the_digest_marks_it_tested(repo: str, tmp_path: Path) -> None:
    digest = push_image(repo, CANONICAL, "one")
    proof = report(tmp_path, f"{repo}@{digest}")
    code, said = cli("promote", "tested", f"{repo}:{CANONICAL}", "--report", str(proof))
    assert code == 0, said
    marker = f"{repo}:{CANONICAL}-tested-{report_hash(proof)}"
    assert f"marked {marker} -> {digest}" in said
    assert digest_of(marker) == digest
    again = mark_tested(f"{repo}:{CANONICAL}", proof)
    assert not again.changed


@pytest.mark.parametrize("kind", ["failed", "unfinished", "by tag", "cpu"])
def test_no_marker_without_a_passed_complete_gpu_run_of_the_digest(
        repo: str, tmp_path: Path, kind: str) -> None:
    digest = push_image(repo, CANONICAL, "one")
    image = f"{repo}:{CANONICAL}" if kind == "by tag" else f"{repo}@{digest}"
    proof = report(tmp_path, image, exit_code=1 if kind == "failed" else 0,
                   complete=kind != "unfinished", no_gpu=3 if kind == "cpu" else 0)
    code, said = cli("promote", "tested", f"{repo}:{CANONICAL}", "--report", str(proof))
    assert code == 2
    assert {"failed": "the validation failed (gemm)", "unfinished": "did not finish",
            "by tag": "not an image by digest", "cpu": "a CPU-mode run"}[kind] in said
    assert digest_of(f"{repo}:{marker_tag(CANONICAL, report_hash(proof))}") is None
    if kind == "cpu":  # where the project validates without GPUs, it says so
        assert mark_tested(f"{repo}:{CANONICAL}", proof, allow_cpu=True).changed


def test_a_report_of_another_digest_marks_nothing(repo: str, tmp_path: Path) -> None:
    validated = push_image(repo, CANONICAL, "one")
    proof = report(tmp_path, f"{repo}@{validated}")
    push_image(repo, CANONICAL, "two")  # the tag moved after the validation
    with pytest.raises(PromoteError, match="the tag moved after the validation"):
        mark_tested(f"{repo}:{CANONICAL}", proof)


def test_no_stable_tag_without_a_marker(repo: str) -> None:
    push_image(repo, CANONICAL, "one")
    code, said = cli("promote", "stable", f"{repo}:{CANONICAL}", "2025.06")
    assert code == 2
    assert "no tested marker" in said and "no marker at all" in said
    assert digest_of(f"{repo}:2025.06") is None


def test_a_marked_image_is_promoted_once_and_the_stable_tag_never_moves(
        repo: str, tmp_path: Path) -> None:
    first = push_image(repo, CANONICAL, "one")
    mark_tested(f"{repo}:{CANONICAL}", report(tmp_path, f"{repo}@{first}"))
    code, said = cli("promote", "stable", f"{repo}:{CANONICAL}", "2025.06")
    assert code == 0, said
    assert digest_of(f"{repo}:2025.06") == first
    assert not promote_stable(f"{repo}:{CANONICAL}", "2025.06").changed
    # a second image, tested too, cannot take the stable tag from the first
    other = "0f0f0f0f0f0f"
    second = push_image(repo, other, "two")
    mark_tested(f"{repo}:{other}", report(tmp_path, f"{repo}@{second}"))
    code, said = cli("promote", "stable", f"{repo}:{other}", "2025.06")
    assert code == 2
    assert f"{repo}:2025.06 names {first}" in said and "never moves" in said
    assert digest_of(f"{repo}:2025.06") == first
    assert promote_stable(f"{repo}:{other}", "2025.07").changed


def test_a_canonical_tag_moved_after_marking_is_not_promoted(repo: str, tmp_path: Path) -> None:
    tested = push_image(repo, CANONICAL, "one")
    proof = report(tmp_path, f"{repo}@{tested}")
    mark_tested(f"{repo}:{CANONICAL}", proof)
    moved = push_image(repo, CANONICAL, "rebuilt")
    with pytest.raises(PromoteError) as refused:
        promote_stable(f"{repo}:{CANONICAL}", "2025.06")
    assert f"names its digest {moved}" in refused.value.message
    assert f"markers of other digests: {CANONICAL}-tested-{report_hash(proof)} ({tested})" \
        in refused.value.message
    with pytest.raises(PromoteError, match="no marker of that report"):
        promote_stable(f"{repo}:{CANONICAL}", "2025.06",
                       report=report(tmp_path, f"{repo}@{moved}"))
    assert digest_of(f"{repo}:2025.06") is None


@pytest.mark.parametrize(("tag", "why"), [
    (CANONICAL, "is the canonical tag itself"), ("x-tested-0123456789ab", "not a tested marker"),
    ("bad tag", "expected a tag like"), ("", "expected a tag like")])
def test_stable_tags_that_are_not_stable_tags(repo: str, tag: str, why: str) -> None:
    push_image(repo, CANONICAL, "one")
    with pytest.raises(PromoteError, match=why):
        promote_stable(f"{repo}:{CANONICAL}", tag)


def test_references_name_their_registry() -> None:
    with pytest.raises(PromoteError, match="the registry named"):
        Reference.parse("imagebuild/rocm-7.0.2:abc")
    ref = Reference.parse("reg.example.org:5000/hpc/rocm:abc@sha256:" + "0" * 64)
    assert (ref.registry, ref.repository, ref.tag) == ("reg.example.org:5000", "hpc/rocm", "abc")
