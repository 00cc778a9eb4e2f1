"""The suite's own rule: in CI (IMAGEBUILD_REQUIRE_INTEGRATION=1) a skipped test fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


SKIPPING = "import pytest\n\n\ndef test_probe():\n    pytest.skip('component missing')\n"


def _run_probe(tmp_path: Path, require: str, body: str = SKIPPING
               ) -> subprocess.CompletedProcess[str]:
    """A probe test in tmp_path, run by pytest with the suite's settings and its conftest
    (loaded as a plugin): nothing is written into tests/."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(body)
    env = {**os.environ, "IMAGEBUILD_REQUIRE_INTEGRATION": require,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tmp_path),
                           "-p", "tests.conftest", str(probe)],
                          check=False, cwd=tmp_path, env=env, capture_output=True, text=True)


def test_a_skip_fails_when_integration_is_required(tmp_path: Path) -> None:
    result = _run_probe(tmp_path, "1")
    assert result.returncode == 1, result.stdout
    assert "1 failed" in result.stdout and "component missing" in result.stdout


def test_a_skip_is_a_skip_outside_ci(tmp_path: Path) -> None:
    result = _run_probe(tmp_path, "0")
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout


def test_a_warning_an_unknown_marker_and_an_unexpected_pass_fail(tmp_path: Path) -> None:
    """The suite's settings: warnings are errors, markers are declared, xfail is strict."""
    for body, says in [
        ("import warnings\n\n\ndef test_probe():\n    warnings.warn('old', DeprecationWarning)\n",
         "DeprecationWarning: old"),
        ("import pytest\n\n\n@pytest.mark.undeclared\ndef test_probe():\n    pass\n",
         "'undeclared' not found in `markers`"),
        ("import pytest\n\n\n@pytest.mark.xfail\ndef test_probe():\n    pass\n",
         "XPASS(strict)"),
    ]:
        result = _run_probe(tmp_path, "0", body)
        assert result.returncode != 0, result.stdout
        assert says in result.stdout, result.stdout
