"""The driver item against AMD's table (driver_compat.json): the table's shape (a public
source per row, every module version leading to tested releases), and the verdicts on
node trees with ROCm 6.3's, 30.x and too-new drivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.inimage.doctor import driver
from imagebuild.inimage.doctor.finding import FAIL, PASS, WARN
from imagebuild.inimage.doctor.needs import needs_from_manifest
from imagebuild.inimage.doctor.node import Node
from tests.inimage.doctor.conftest import build_case

TABLE = driver.load_table()


def test_every_row_names_its_public_source() -> None:
    for row in TABLE["drivers"] + TABLE["module_versions"]:
        assert row["source"].startswith("https://"), row


def test_every_module_version_leads_to_tested_releases() -> None:
    drivers = {row["driver"] for row in TABLE["drivers"]}
    for row in TABLE["module_versions"]:
        assert row["driver"] in drivers, row
    for row in TABLE["drivers"]:  # the check names the first and last as the window
        keys = [tuple(int(p) for p in t.split(".")) for t in row["tested_rocm"]]
        assert keys == sorted(keys), row["driver"]


@pytest.mark.parametrize("module, release", [
    ("6.10.5", "6.3"), ("6.12.12", "6.4"), ("6.14.14", "30.10"), ("6.16.6", "30.20"),
    ("6.16.13", "30.30")])
def test_the_drivers_of_recent_releases_are_mapped(module: str, release: str) -> None:
    assert {r["module"]: r["driver"] for r in TABLE["module_versions"]}[module] == release


def _driver(name: str, tmp_path: Path) -> tuple[str, str, str]:
    case = build_case(name, tmp_path)
    finding = driver.check(Node(case.root), needs_from_manifest(case.manifest), TABLE)
    return finding.status, finding.reason, finding.fix


def test_a_30x_node_passes_a_7_2_image(tmp_path: Path) -> None:
    status, reason, _ = _driver("driver-30.30-mi300x", tmp_path)
    assert status == PASS
    assert reason.startswith("amdgpu 6.16.13 (driver 30.30) is tested with ROCm 6.3, 6.4, "
                             "7.0, 7.1, 7.2; the image has 7.2.4")


def test_a_driver_too_new_for_the_image_fails(tmp_path: Path) -> None:
    status, reason, fix = _driver("driver-too-new-mi300x", tmp_path)
    assert status == FAIL
    assert "driver 30.30" in reason and "the image has 6.1.3, older than that" in reason
    assert fix == "use an image with ROCm 6.3 or newer"


def test_an_image_too_new_for_rocm_6_3s_driver_fails(tmp_path: Path) -> None:
    status, reason, fix = _driver("driver-6.3-lumi", tmp_path)
    assert status == FAIL
    assert "amdgpu 6.10.5 (driver 6.3) is tested with ROCm 6.1 to 7.0" in reason
    assert "newer than that" in reason and fix.startswith("use an image with ROCm 7.0 or older")


def test_a_module_version_outside_the_table_warns(tmp_path: Path) -> None:
    case = build_case("driver-30.30-mi300x", tmp_path)
    (case.root / "sys/module/amdgpu/version").write_text("6.99.1\n")
    finding = driver.check(Node(case.root), needs_from_manifest(case.manifest), TABLE)
    assert finding.status == WARN and "not in the compatibility table" in finding.reason
