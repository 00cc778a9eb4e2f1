"""The in-image checks run on Python 3.10, 3.11 and 3.12: images ship any of them.

vermin (PyPI) finds the minimum Python version each construct needs (datetime.UTC is
3.11+, for one) statically, so this runs without a 3.10 interpreter.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.validate.stage_checks import CHECKS_DIR


def _vermin() -> list[str]:
    found = shutil.which("vermin") or str(Path(sys.executable).with_name("vermin"))
    if not Path(found).exists():
        pytest.skip("vermin is not installed (pip install 'imagebuild[test]')")
    return [found]


def _violations(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*_vermin(), "--target=3.10-", "--violations", "--no-tips",
                           "--eval-annotations", str(path)],
                          capture_output=True, text=True, check=False, timeout=300)


def test_checks_need_nothing_newer_than_python_3_10() -> None:
    proc = _violations(CHECKS_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_version_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "new.py").write_text("import datetime\nprint(datetime.UTC)\n")
    proc = _violations(tmp_path)
    assert proc.returncode != 0 and "datetime.UTC" in proc.stdout
