"""``imagebuild doctor`` and validate's preflight, end to end through the CLI, on node
trees built from the fixture folders (tests/inimage/doctor/fixtures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import imagebuild
from imagebuild.cli import main
from imagebuild.doctor.preflight import why_not
from tests.inimage.doctor.conftest import build_case

SCHEMA = json.loads((Path(imagebuild.__file__).parent / "data/doctor-report.schema.json")
                    .read_text())


def assert_valid(document: dict[str, Any]) -> None:
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(document)]
    assert not errors, errors
    assert document["counts"] == {s: sum(f["status"] == s for f in document["findings"])
                                  for s in ("pass", "warn", "fail", "skip")}


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_a_healthy_lumi_node_passes_a_shipped_recipe(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    case = build_case("healthy-lumi", tmp_path)
    report = tmp_path / "doctor.json"
    code, out, _ = run_cli(capsys, "doctor", "rocm-6.4.4", "--site", "lumi", "--root",
                           str(case.root), "--json", str(report))
    assert code == 0, out
    assert "PASS  driver      amdgpu 6.8.5 (driver 6.2) is tested with ROCm 6.0" in out
    assert "PASS  libfabric   the host has /opt/cray/libfabric/1.22.0/lib64/libfabric.so.1 " \
           "(up to FABRIC_1.7); the plugin needs FABRIC_1.7" in out
    document = json.loads(report.read_text())
    assert_valid(document)
    assert document["ok"] is True and document["target"] == "recipe"
    assert [f["item"] for f in document["findings"]][:3] == ["driver", "gfx", "xnack"]


def test_a_node_the_image_has_no_code_for_fails(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """LUMI's gfx90a against a recipe narrowed to gfx942 (a project recipe extending the
    shipped one), exit 1 and the fix on the next line."""
    case = build_case("healthy-lumi", tmp_path)
    project = tmp_path / "project"
    (project / "recipes").mkdir(parents=True)
    shipped = Path(__file__).parents[2] / "recipes"
    for name in ("_common.yaml", "rocm-6.4.4.yaml"):
        (project / "recipes" / name).write_text((shipped / name).read_text())
    (project / "recipes" / "mi300-only.yaml").write_text(
        "version: 1\nextends: rocm-6.4.4.yaml\ndescription: MI300 only\ngpu_targets: [gfx942]\n")
    report = tmp_path / "doctor.json"
    code, out, _ = run_cli(capsys, "-C", str(project), "doctor", "mi300-only", "--site", "lumi",
                           "--root", str(case.root), "--json", str(report))
    assert code == 1, out
    assert "FAIL  gfx" in out and "node has gfx90a" in out
    assert "fix: add gfx90a to the recipe's gpu_targets and rebuild" in out
    document = json.loads(report.read_text())
    assert_valid(document)
    assert document["counts"]["fail"] == 1 and document["ok"] is False


def test_inside_the_image_it_reads_the_trees_manifest(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    case = build_case("two-amd-smi-mi300x", tmp_path)
    code, out, _ = run_cli(capsys, "doctor", "--root", str(case.root))
    assert code == 1
    assert "doctor: rocm-6.4.4 (ROCm 6.4.4, gfx90a, gfx942)" in out
    assert "FAIL  smi" in out and "two copies of amd_smi" in out


def test_the_schema_refuses_an_unknown_status() -> None:
    bad = {"schema": 1, "tool": "imagebuild doctor", "image": "x", "rocm": None, "root": "/",
           "ok": True, "counts": {"pass": 0, "warn": 0, "fail": 0, "skip": 0},
           "findings": [{"item": "gfx", "status": "maybe", "reason": "r", "fix": ""}]}
    with pytest.raises(AssertionError):
        assert_valid(bad)


def test_no_target_outside_an_image_is_bad_input(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "doctor", "--root", str(tmp_path))
    assert code == 2
    assert "no target and no" in err and "hint: name a recipe or an image" in err


def test_a_root_that_is_not_a_directory_is_bad_input(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "doctor", "rocm-6.4.4", "--root", str(tmp_path / "nope"))
    assert code == 2 and "--root" in err and "not a directory" in err


def test_validate_stops_before_the_gpu_checks_on_a_failed_item(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    case = build_case("xnack-off-beverin", tmp_path)
    monkeypatch.setenv("IMAGEBUILD_NODE_ROOT", str(case.root))
    monkeypatch.setenv("HSA_XNACK", "1")
    code, _, err = run_cli(capsys, "validate", "rocm-6.4.4", "--site", "cscs-beverin",
                           "--gpus", "rocm", "--launcher", "docker")
    assert code == 1
    assert "FAIL  xnack" in err
    assert "validate stopped before the GPU checks" in err


def test_validate_runs_the_doctor_only_where_the_checks_meet_amd_gpus() -> None:
    assert why_not("rocm", "docker", cpu=False) is None
    assert why_not("rocm", "docker", cpu=True)
    assert why_not("none", "local", cpu=False)
    assert why_not("nvidia", "docker", cpu=False)
    assert "runs the doctor in the image on each of them" in (why_not("rocm", "sbatch",
                                                                       cpu=False) or "")
