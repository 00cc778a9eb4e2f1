"""Every broken recipe gets clear one-line errors, exit code 2 and no traceback.

One fixture folder per failure mode (tests/recipe/fixtures/bad/<case>/): recipe.yaml, any
parents it extends, and expected.txt with the exact lines imagebuild must print.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.cli import main

BAD = Path(__file__).parent / "fixtures" / "bad"
CASES = sorted(p.name for p in BAD.iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASES)
def test_bad_recipe_message(case: str, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    folder = BAD / case
    monkeypatch.chdir(folder)
    code = main(["show", "recipe.yaml"])
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err
    expected = (folder / "expected.txt").read_text()
    assert captured.err == expected, f"--- expected\n{expected}--- got\n{captured.err}"
    assert captured.out == ""


def test_every_case_has_expected_output() -> None:
    missing = [case for case in CASES if not (BAD / case / "expected.txt").exists()]
    assert not missing
