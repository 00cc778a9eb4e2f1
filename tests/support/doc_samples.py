"""The sample runs README.md and docs/*.md show, run again: a fenced block whose lines start
with ``$ `` holds commands (``VAR=value`` lines set variables, ``VAR=value cmd`` runs with
them, a trailing ``\\`` continues a line, ``  # ...`` is a comment) and then what they print.

A test runs a block's commands as the document writes them (``imagebuild`` is this
checkout's), with ``.../NAME`` standing for a directory the test made, and compares what
they print with the block, line by line; a ``...`` line in the block stands for any lines.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ELIDED = "..."


@dataclass(frozen=True)
class Sample:
    document: str
    line: int
    commands: tuple[str, ...]
    output: tuple[str, ...]


def fenced_blocks(document: str) -> list[tuple[int, str, list[str]]]:
    """(line of the opening fence, info string, lines) of every fenced block."""
    lines = (REPO / document).read_text().splitlines()
    blocks: list[tuple[int, str, list[str]]] = []
    opened: tuple[int, str] | None = None
    body: list[str] = []
    for number, line in enumerate(lines, start=1):
        if line.startswith("```"):
            if opened is None:
                opened, body = (number, line[3:].strip()), []
            else:
                blocks.append((opened[0], opened[1], body))
                opened = None
        elif opened is not None:
            body.append(line)
    return blocks


def samples(document: str) -> list[Sample]:
    """Every block of ``document`` that starts with a ``$ `` line."""
    found = []
    for number, _, body in fenced_blocks(document):
        if not body or not body[0].startswith("$ "):
            continue
        commands: list[str] = []
        index = 0
        while index < len(body) and body[index].startswith("$ "):
            command = body[index][2:]
            while command.rstrip().endswith("\\") and index + 1 < len(body):
                index += 1
                command = command.rstrip()[:-1] + " " + body[index].strip()
            commands.append(command)
            index += 1
        found.append(Sample(document, number, tuple(commands), tuple(body[index:])))
    return found


def sample(document: str, starting: str) -> Sample:
    """The one sample of ``document`` whose first command starts with ``starting``."""
    matches = [s for s in samples(document) if s.commands[0].startswith(starting)]
    assert len(matches) == 1, f"{document}: samples starting {starting!r}: {matches}"
    return matches[0]


def run_sample(found: Sample, trees: Path, env: dict[str, str] | None = None,
               cwd: Path | None = None, replace: dict[str, str] | None = None) -> list[str]:
    """Run the sample's commands (``imagebuild`` and ``python`` are this checkout's);
    ``.../NAME`` is ``trees/NAME``. Returns what they printed (stdout and stderr as they came, unbuffered),
    with ``trees`` written back as ``...`` and each ``replace`` key as its value (this
    machine's name as the sample's)."""
    variables = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    printed: list[str] = []
    for command in found.commands:
        command = command.split("  #", 1)[0].strip()
        words = shlex.split(command.replace(".../", f"{trees}/"))
        assignments = {}
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            name, _, value = words.pop(0).partition("=")
            assignments[name] = value
        if not words:  # `$ L=...`: a variable for the next lines
            variables.update(assignments)
            continue
        words = [re.sub(r"\$(\w+)", lambda m: variables.get(m.group(1), m.group(0)), w)
                 for w in words]
        program = {"imagebuild": [sys.executable, "-m", "imagebuild"],
                   "python": [sys.executable]}.get(words[0])
        assert program, f"{found.document}:{found.line}: {command}"
        done = subprocess.run([*program, *words[1:]], cwd=cwd or REPO,
                              env={**variables, **assignments, "PYTHONUNBUFFERED": "1"},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=300, check=False)
        text = done.stdout.replace(str(trees), "...")
        for real, shown in (replace or {}).items():
            text = text.replace(real, shown)
        printed += text.splitlines()
    return printed


def matches(expected: tuple[str, ...], printed: list[str]) -> bool:
    """Line for line, a ``...`` line in ``expected`` standing for any number of lines."""
    if not expected:
        return not printed
    head, rest = expected[0], expected[1:]
    if head == ELIDED:
        return any(matches(rest, printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and printed[0].rstrip() == head.rstrip() and matches(rest, printed[1:])


def assert_reproduced(found: Sample, printed: list[str]) -> None:
    assert matches(found.output, printed), (
        f"{found.document}:{found.line}: the sample differs from what "
        f"{found.commands[-1]!r} prints now:\n" + "\n".join(printed))
