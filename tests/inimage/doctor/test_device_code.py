"""The gfx item reads the final stage's device-code report (/opt/imagebuild/device-code.json)
where the image has one: the in-image command on MI300X-shaped trees, and the report's
branches (targets pruned away, a kernel library without files, MIOpen's exception)."""

from __future__ import annotations

import json
from pathlib import Path

from imagebuild.inimage.doctor import gfx
from imagebuild.inimage.doctor.finding import FAIL, PASS
from imagebuild.inimage.doctor.needs import needs_from_manifest, with_device_code
from imagebuild.inimage.doctor.node import Node
from tests.inimage.doctor.conftest import build_case
from tests.inimage.doctor.test_in_image_command import run_staged


def _findings(tmp_path: Path, name: str) -> dict[str, dict[str, str]]:
    case = build_case(name, tmp_path)
    proc = run_staged(tmp_path, "--root", str(case.root), "--json", "-", env=case.env)
    return {f["item"]: f for f in json.loads(proc.stdout)["findings"]}


def test_the_in_image_command_reads_the_report(tmp_path: Path) -> None:
    kept = _findings(tmp_path / "kept", "device-code-kept-mi300x")["gfx"]
    assert kept["status"] == PASS
    assert "device-code.json keeps their kernels (2 kernel libraries)" in kept["reason"]
    missing = _findings(tmp_path / "missing", "device-code-missing-mi300x")["gfx"]
    assert missing["status"] == FAIL
    assert missing["reason"].startswith("/opt/rocm/lib/librocblas.so.4 has no kernel files for "
                                        "gfx942 in /opt/rocm/lib/rocblas/library")


def _gfx(tmp_path: Path, report: dict) -> tuple[str, str]:
    case = build_case("device-code-kept-mi300x", tmp_path)
    finding = gfx.check(Node(case.root), with_device_code(needs_from_manifest(case.manifest),
                                                          report))
    return finding.status, finding.reason


def test_targets_the_diet_removed_fail(tmp_path: Path) -> None:
    status, reason = _gfx(tmp_path, {"targets": ["gfx90a:xnack-"], "checked": []})
    assert status == FAIL
    assert "device-code.json keeps device code for gfx90a only" in reason


def test_miopen_without_a_database_is_not_required(tmp_path: Path) -> None:
    report = {"targets": ["gfx942"], "checked": [
        {"library": "/opt/rocm/lib/libMIOpen.so.1", "stem": "libMIOpen",
         "kernels": "/opt/rocm/share/miopen/db", "files": {"gfx942": 0}},
        {"library": "/opt/rocm/lib/libhipblaslt.so.1", "stem": "libhipblaslt",
         "kernels": "/opt/rocm/lib/hipblaslt/library", "files": {"gfx942:xnack-": 3}}]}
    assert _gfx(tmp_path, report)[0] == PASS
    report["checked"][1]["files"] = {"gfx942:xnack-": 0}
    status, reason = _gfx(tmp_path / "again", report)
    assert status == FAIL and "libhipblaslt.so.1 has no kernel files for gfx942" in reason


def test_without_a_report_the_manifest_decides(tmp_path: Path) -> None:
    status, reason = _gfx(tmp_path, None)  # type: ignore[arg-type]
    assert status == PASS and "device-code.json" not in reason
