"""``python -m imagebuild_checks doctor`` as images run it: the staged copy of the
in-image package, unable to import imagebuild, on a node tree holding the image's files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from imagebuild.validate.stage_checks import IMAGE_PACKAGE, stage
from tests.doctor.test_command import assert_valid
from tests.inimage.doctor.conftest import build_case
from tests.inimage.test_purity import BLOCKER


def run_staged(tmp_path: Path, *argv: str, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    lib = stage(tmp_path / "lib")
    blocker = tmp_path / "blocker"
    blocker.mkdir(exist_ok=True)
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGEBUILD_", "PYTHON"))}
    clean.update(env or {})
    clean["PYTHONPATH"] = f"{blocker}{os.pathsep}{lib}"
    return subprocess.run([sys.executable, "-m", IMAGE_PACKAGE, "doctor", *argv], cwd=tmp_path,
                          env=clean, capture_output=True, text=True, timeout=120, check=False)


def test_the_in_image_part_finds_two_smi_backends(tmp_path: Path) -> None:
    case = build_case("two-rocm-smi-beverin", tmp_path)
    proc = run_staged(tmp_path, "--root", str(case.root), "--json", "-", env=case.env)
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)
    assert_valid(document)
    found = {f["item"]: f for f in document["findings"]}
    assert found["smi"]["status"] == "fail"
    assert "two copies of rocm_smi" in found["smi"]["reason"]
    assert found["libfabric"]["status"] == "pass"  # the plugin's libfabric, via LD_LIBRARY_PATH
    assert document["part"] == "image" and document["ok"] is False


def test_the_in_image_part_passes_a_healthy_image(tmp_path: Path) -> None:
    case = build_case("one-amd-smi-mi300x", tmp_path)
    proc = run_staged(tmp_path, "--root", str(case.root), env=case.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS  smi" in proc.stdout and "one copy of each SMI library" in proc.stdout


def test_without_a_manifest_it_says_so(tmp_path: Path) -> None:
    proc = run_staged(tmp_path, "--root", str(tmp_path))
    assert proc.returncode == 2
    assert "no manifest at" in proc.stderr
