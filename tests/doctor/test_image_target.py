"""An image target at the engine seam: the manifest read with ``cat`` in a throwaway
container, and the in-image part's JSON merged in (smi, rocm-binds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagebuild.doctor.image_needs import needs_for_image
from imagebuild.engine.base import RunResult
from imagebuild.errors import ValidateError

MANIFEST = {"recipe": "rocm-7.2.4", "rocm_version": "7.2.4", "gpu_targets": ["gfx942"],
            "venv": "/opt/venv", "network_plugin": {"enabled": True, "elf": {
                "library": "/opt/aws-ofi-nccl/lib/librccl-net.so",
                "libfabric_versions_needed": ["FABRIC_1.7"]}}}


class Engine:
    def __init__(self, results: dict[str, RunResult]):
        self.results = results
        self.commands: list[list[str]] = []

    def run(self, ref: str, command: list[str], **_: Any) -> RunResult:
        self.commands.append(command)
        return self.results[command[0]]


def test_reads_the_images_manifest() -> None:
    engine = Engine({"cat": RunResult(0, json.dumps(MANIFEST))})
    needs = needs_for_image("registry/x:1", engine)
    assert engine.commands == [["cat", "/opt/imagebuild/manifest.json"]]
    assert needs.rocm == "7.2.4" and needs.fabric_needs == ("FABRIC_1.7",)
    assert needs.plugin_library == "/opt/aws-ofi-nccl/lib/librccl-net.so"


def test_an_image_without_a_manifest_is_bad_input() -> None:
    engine = Engine({"cat": RunResult(1, "cat: /opt/imagebuild/manifest.json: No such file")})
    with pytest.raises(ValidateError, match="has no /opt/imagebuild/manifest.json"):
        needs_for_image("debian:12", engine)


def test_the_in_image_part_replaces_the_hosts_skipped_items(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from imagebuild.commands import doctor

    inside = {"findings": [{"item": "smi", "status": "fail", "reason": "two copies", "fix": "f"},
                           {"item": "driver", "status": "pass", "reason": "ignored", "fix": ""}]}
    engine = Engine({"cat": RunResult(0, json.dumps(MANIFEST)),
                     "python3": RunResult(1, "some log line\n" + json.dumps(inside))})
    monkeypatch.setattr("imagebuild.engine.select.open_engine", lambda **_: engine)
    findings = doctor.in_image_findings("registry/x:1")
    assert [(f.item, f.status) for f in findings] == [("smi", "fail")]
    assert engine.commands[-1] == ["python3", "-m", "imagebuild_checks", "doctor", "--json", "-"]


def test_an_image_built_before_the_doctor_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagebuild.commands import doctor

    engine = Engine({"python3": RunResult(1, "No module named imagebuild_checks.doctor")})
    monkeypatch.setattr("imagebuild.engine.select.open_engine", lambda **_: engine)
    [finding] = doctor.in_image_findings("old:1")
    assert finding.status == "skip"
    assert "No module named imagebuild_checks.doctor" in finding.reason
