"""The in-image package (imagebuild.inimage: checks, tuning, model) imports only the
standard library and torch, so it runs in any image on any launcher, and runs from a copy
under the image's package name with nothing else importable."""

from __future__ import annotations

import ast
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

from imagebuild.validate.stage_checks import CHECKS_DIR, IMAGE_PACKAGE, stage
from tests.support.validate import assert_valid_report, check

ALLOWED = set(sys.stdlib_module_names) | {"torch"}
#: The one module that imports what it checks: the megatron check's CPU probe runs, in a
#: process of its own, against the image's Megatron-LM (imported nowhere else).
ALLOWED_IN = {"model/megatron_probe.py": {"megatron"}}

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


def test_every_import_in_the_in_image_package_is_stdlib_or_torch() -> None:
    modules = sorted(CHECKS_DIR.rglob("*.py"))
    assert {"checks", "tuning", "model"} <= {p.parent.name for p in modules}
    assert len(modules) > 30
    offenders = [f"{path.relative_to(CHECKS_DIR)}:{line}: {name}" for path in modules
                 for line, name in _imports(path) if name.split(".")[0] not in ALLOWED
                 | ALLOWED_IN.get(str(path.relative_to(CHECKS_DIR)), set())]
    offenders += _escapes(CHECKS_DIR, modules)
    assert not offenders, "non-stdlib imports in the in-image package:\n" + "\n".join(offenders)


def _escapes(root: Path, modules: list[Path]) -> list[str]:
    """Relative imports that climb above ``root``: they would reach the host package."""
    found = []
    for path in modules:
        depth = len(path.relative_to(root).parts) - 1  # 0 for a module at the top
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level > depth + 1:
                found.append(f"{path.relative_to(root)}:{node.lineno}: "
                             f"{'.' * node.level}{node.module or ''} leaves the package")
    return found


def test_the_import_rule_can_fail(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    bad = [tmp_path / "a.py", tmp_path / "sub" / "b.py"]
    bad[0].write_text("import yaml\nfrom . import c\n")
    bad[1].write_text("from ...imagebuild import errors\nfrom .. import a\n")
    assert [name for path in bad for _, name in _imports(path)
            if name.split(".")[0] not in ALLOWED] == ["yaml"]
    assert _escapes(tmp_path, bad) == ["sub/b.py:1: ...imagebuild leaves the package"]


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
