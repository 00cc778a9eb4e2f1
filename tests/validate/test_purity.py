"""The in-image checks import only the standard library and torch, so they
run in any image on any launcher, and run from a copy under the image's package name with nothing else importable."""

from __future__ import annotations

import ast
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

from imagebuild.validate.bundle import CHECKS_DIR, IMAGE_PACKAGE, stage
from tests.support.validate import assert_valid_report, check

ALLOWED = set(sys.stdlib_module_names) | {"torch"}

BLOCKER = '''
import sys
BLOCKED = {"imagebuild", "yaml", "rich", "requests", "docker", "jsonschema", "matplotlib",
           "tenacity", "tomli_w", "uv"}

class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"the in-image checks imported {name}, which images do not have")
        return None

sys.meta_path.insert(0, Blocker())
'''


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.append((node.lineno, node.module or ""))
    return found


def test_every_import_in_the_checks_package_is_stdlib_or_torch() -> None:
    modules = sorted(CHECKS_DIR.glob("*.py"))
    assert len(modules) > 10
    offenders = [f"{path.name}:{line}: {name}" for path in modules
                 for line, name in _imports(path) if name.split(".")[0] not in ALLOWED]
    assert not offenders, "non-stdlib imports in the in-image checks:\n" + "\n".join(offenders)


def test_staged_checks_run_alone_under_the_image_package_name(tmp_path: Path) -> None:
    """As in an image: `imagebuild validate` -> python -m imagebuild_checks validate ...,
    two gloo ranks spawned by the runner, every process unable to import imagebuild."""
    lib = stage(tmp_path / "lib")
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({
        "recipe": "purity-test", "input_hash": "sha256:1234", "rocm_version": None,
        "python_version": platform.python_version(), "wheels": {"torch": torch.__version__},
        "gpu_targets": [], "hipblaslt": {"enabled": False},
        "network_plugin": {"enabled": False}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGEBUILD_", "PYTHON"))}
    env["PYTHONPATH"] = f"{blocker}{os.pathsep}{lib}"
    env["IMAGEBUILD_MANIFEST"] = str(manifest)
    proc = subprocess.run(
        [sys.executable, "-m", IMAGE_PACKAGE, "validate", "--checks",
         "environment,gemm,collectives,train", "--allow-cpu", "--train-steps", "2",
         "--report", "out.json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "validation passed" in proc.stdout
    report = json.loads((tmp_path / "out.json").read_text())
    assert_valid_report(report)
    assert report["recipe"] == "purity-test" and report["input_hash"] == "sha256:1234"
    assert report["world_size"] == 2 and report["launcher"] == "spawn"
    assert check(report, "environment")["status"] == "passed"
    assert check(report, "gemm")["cause"] == "no_gpu"
    assert check(report, "collectives")["status"] == "passed"
    assert check(report, "train")["status"] == "passed"


def test_blocker_really_blocks(tmp_path: Path) -> None:
    """The test above can fail: a forbidden import under the same setup is an error."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", "import yaml"], env=env, capture_output=True,
                          text=True, check=False)
    assert proc.returncode != 0 and "images do not have" in proc.stderr
