"""``imagebuild doctor IMAGE`` through a real Docker engine: the manifest is read from the
image, the node from a test tree; an image without Python (or built before the doctor)
gets the in-image part skipped with the reason, not a crash."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from imagebuild.cli import main
from imagebuild.engine.docker import DockerEngine
from tests.inimage.doctor.conftest import FIXTURES, build_case

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture
def image_with_manifest(docker_engine: DockerEngine, base_image: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    context = tmp_path / "context"
    context.mkdir()
    manifest = json.loads((FIXTURES / "images" / "rocm-7.2.4-gfx942.json").read_text())
    (context / "manifest.json").write_text(json.dumps(manifest))
    (context / "Dockerfile").write_text(
        f"FROM {base_image}\nCOPY manifest.json /opt/imagebuild/manifest.json\n")
    tag = f"imagebuild-test/doctor:{uuid.uuid4().hex[:12]}"
    subprocess.run(["docker", "build", "--network", "host", "-q", "-t", tag, str(context)],
                   check=True, capture_output=True, text=True,
                   env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    yield tag
    subprocess.run(["docker", "rmi", "-f", tag], check=False, capture_output=True)


def test_an_image_built_for_mi300_fails_on_a_lumi_node(
        image_with_manifest: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = build_case("healthy-lumi", tmp_path)
    report = tmp_path / "doctor.json"
    code = main(["doctor", image_with_manifest, "--site", "lumi", "--root", str(case.root),
                 "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 1, out
    document = json.loads(report.read_text())
    found = {f["item"]: f for f in document["findings"]}
    assert document["image"] == image_with_manifest and document["target"] == "image"
    assert found["gfx"]["status"] == "fail" and "gfx942 only" in found["gfx"]["reason"]
    assert found["smi"]["status"] == "skip"
    assert found["smi"]["reason"].startswith("the in-image part did not run (exit ")
