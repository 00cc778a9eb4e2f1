"""The suite's own rule: in CI (IMAGEBUILD_REQUIRE_INTEGRATION=1) a skipped test fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _run_probe(tmp_path: Path, require: str) -> subprocess.CompletedProcess[str]:
    probe = REPO / "tests" / f"test_probe_{os.getpid()}.py"
    probe.write_text("import pytest\n\n\ndef test_probe():\n"
                     "    pytest.skip('component missing')\n")
    try:
        env = {**os.environ, "IMAGEBUILD_REQUIRE_INTEGRATION": require}
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               str(probe)], check=False, cwd=REPO, env=env,
                              capture_output=True, text=True)
    finally:
        probe.unlink()


def test_a_skip_fails_when_integration_is_required(tmp_path: Path) -> None:
    result = _run_probe(tmp_path, "1")
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout and "component missing" in result.stdout


def test_a_skip_is_a_skip_outside_ci(tmp_path: Path) -> None:
    result = _run_probe(tmp_path, "0")
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
