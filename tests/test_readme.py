"""The README's front door is true: the commands it says run here do, every document it
links exists, every command has a row, and it stays short (the details live in docs/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.commands import COMMANDS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _runnable_here() -> list[str]:
    """The shell block after "Try these here"."""
    after = README.split("Try these here", 1)[1]
    block = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert block, "no ```sh block after 'Try these here'"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.parametrize("line", _runnable_here())
def test_the_commands_the_readme_runs_here_succeed(line: str) -> None:
    words = line.split()
    assert words[0] == "imagebuild"
    done = subprocess.run([sys.executable, "-m", "imagebuild", *words[1:]], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr[-2000:]}"


def test_every_linked_document_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", README)
    missing = [link for link in links if not link.startswith("http")
               and not (REPO / link).exists()]
    assert links and missing == []


def test_every_command_has_a_row() -> None:
    table = README.split("## Commands", 1)[1]
    missing = [name.rstrip("_") for name in COMMANDS
               if f"`imagebuild {name.rstrip('_')}" not in table]
    assert missing == []


def test_the_front_door_fits_on_two_screens() -> None:
    assert len(README.splitlines()) <= 150
