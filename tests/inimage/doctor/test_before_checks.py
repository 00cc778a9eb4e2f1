"""``imagebuild validate`` inside the image (``srun --environment=... imagebuild validate``,
``apptainer exec ... imagebuild validate``) runs the doctor's in-image items before the
checks: the staged in-image package, unable to import imagebuild, on node-shaped trees."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from imagebuild.inimage.doctor.before_checks import DOCTOR_DONE_ENV, NODE_ROOT_ENV, preflight
from imagebuild.validate.stage_checks import IMAGE_PACKAGE, stage
from tests.inimage.doctor.conftest import NodeCase, build_case
from tests.inimage.test_purity import BLOCKER
from tests.support.validate import run_imagebuild


def validate_in_image(tmp_path: Path, case: NodeCase, *argv: str
                      ) -> tuple[subprocess.CompletedProcess[str], dict]:
    """The image's `imagebuild validate` (the runner's `validate` argv) on ``case``'s node."""
    lib = tmp_path / "lib"
    if not lib.exists():
        stage(lib)
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGEBUILD_", "PYTHON"))}
    env.update(case.env)
    env.update({"PYTHONPATH": f"{blocker}{os.pathsep}{lib}", NODE_ROOT_ENV: str(case.root),
                "IMAGEBUILD_MANIFEST": str(case.root / "opt/imagebuild/manifest.json")})
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    proc = subprocess.run([sys.executable, "-m", IMAGE_PACKAGE, "validate", "--checks",
                           "environment", "--allow-cpu", "--report", str(report), *argv],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    return proc, json.loads(report.read_text()) if report.exists() else {}


def test_a_node_that_does_not_fit_stops_before_the_checks(tmp_path: Path) -> None:
    case = build_case("driver-too-old-mi300x", tmp_path)
    proc, report = validate_in_image(tmp_path, case)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  driver" in proc.stderr and "amdgpu 6.2.4 (driver 5.7)" in proc.stderr
    assert "fix: use an image with ROCm" in proc.stderr
    assert "validate stopped before the checks" in proc.stderr
    assert report["stopped_by"] == "doctor" and report["complete"] is False
    assert [c["name"] for c in report["checks"]] == ["doctor"]  # no check ran
    [check] = report["checks"]
    assert check["status"] == "failed" and check["reason"].startswith(
        "this node does not fit the image, no check ran: driver: amdgpu 6.2.4")
    assert report["checks_pending"] == ["environment"]
    assert report["summary"]["exit_code"] == 1
    items = {f["item"]: f["status"] for f in report["doctor"]["findings"]}
    assert items["driver"] == "fail" and "smi" in items  # the in-image items ran
    assert "validation FAILED" in proc.stdout and "failed: doctor" in proc.stdout


def test_no_doctor_runs_the_checks_on_the_same_node(tmp_path: Path) -> None:
    case = build_case("driver-too-old-mi300x", tmp_path)
    proc, report = validate_in_image(tmp_path, case, "--no-doctor")
    assert "doctor:" not in proc.stderr, proc.stderr
    assert "stopped_by" not in report
    assert [c["name"] for c in report["checks"]] == ["environment"]


def test_cpu_mode_has_no_gpu_checks_to_protect(tmp_path: Path) -> None:
    case = build_case("driver-too-old-mi300x", tmp_path)
    proc, report = validate_in_image(tmp_path, case, "--cpu")
    assert "doctor:" not in proc.stderr, proc.stderr
    assert [c["name"] for c in report["checks"]] == ["environment"]


def test_a_node_that_fits_goes_on_to_the_checks(tmp_path: Path) -> None:
    case = build_case("one-amd-smi-mi300x", tmp_path)
    proc, report = validate_in_image(tmp_path, case)
    assert "doctor: " in proc.stderr and "PASS  smi" in proc.stderr, proc.stderr
    assert "validate stopped" not in proc.stderr
    assert "stopped_by" not in report
    assert [c["name"] for c in report["checks"]] == ["environment"]


def _options(**values: object) -> SimpleNamespace:
    return SimpleNamespace(**{"doctor": True, "cpu": False, "manifest": None, **values})


@pytest.mark.parametrize(("options", "env", "why"), [
    (_options(doctor=False), {}, "--no-doctor"),
    (_options(cpu=True), {}, "--cpu"),
    (_options(), {"IMAGEBUILD_VALIDATE_LAUNCHER": "spawn"}, "the runner ran the doctor"),
])
def test_where_it_does_not_run(options: SimpleNamespace, env: dict[str, str], why: str,
                               tmp_path: Path) -> None:
    case = build_case("driver-too-old-mi300x", tmp_path)
    result = preflight(options, {NODE_ROOT_ENV: str(case.root), **env})
    assert result.skipped and why in result.skipped and not result.findings
    ran = preflight(_options(), {NODE_ROOT_ENV: str(case.root)})
    assert ran.skipped is None and ran.stops  # the same node, nothing declined: it stops


def test_a_node_without_amdgpu_is_not_asked(tmp_path: Path) -> None:
    result = preflight(_options(), {NODE_ROOT_ENV: str(tmp_path)})
    assert result.skipped and "no amdgpu driver" in result.skipped


def test_host_validate_runs_it_once(tmp_path: Path) -> None:
    """The sbatch script's per-node doctor step runs it; the runner after it does not.
    A job in a plain Python environment has no such step: its runner runs it."""
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"")
    proc = run_imagebuild("validate", str(sif), "--launcher", "sbatch", "--gpus", "rocm",
                          "--nodes", "1", "--checks", "environment", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [script] = tmp_path.glob("*.sbatch")
    lines = script.read_text().splitlines()
    doctor = [line for line in lines if f"-m {IMAGE_PACKAGE} doctor" in line]
    runner = [line for line in lines if f"-m {IMAGE_PACKAGE} --checks" in line]
    assert len(doctor) == 1 and len(runner) == 1
    # An environment variable, not a flag: images built before the runner's doctor step
    # would refuse an unknown flag.
    assert f"export {DOCTOR_DONE_ENV}=1" in lines and "--no-doctor" not in runner[0]
    assert lines.index(f"export {DOCTOR_DONE_ENV}=1") < lines.index(runner[0])
    script.unlink()
    plain = run_imagebuild("validate", "--local", "--launcher", "sbatch", "--gpus", "rocm",
                           "--nodes", "1", "--checks", "environment", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    [script] = tmp_path.glob("*.sbatch")
    assert DOCTOR_DONE_ENV not in script.read_text()


def test_the_hosts_word_keeps_the_runner_from_running_it_again(tmp_path: Path) -> None:
    case = build_case("driver-too-old-mi300x", tmp_path)
    result = preflight(_options(), {NODE_ROOT_ENV: str(case.root), DOCTOR_DONE_ENV: "1"})
    assert result.skipped and "the host command ran it" in result.skipped
