"""Run hipBLASLt's find_exact.py on the configs of find_exact.py (this package's), and read
back what it leaves: ``<out>/0_Bench/result_<TA><TB>_<type>_<m>x<n>x<b>x<k>.txt`` (the
bench's output for one size: every solution's row and the ``Winner:`` block, bench.py reads
it) and ``<out>/1_LogicYaml/`` (the winners' logic files, for a hipBLASLt rebuild).

Before it runs anything, what find_exact.py needs is checked, each missing piece named:
the script, ``<build dir>/clients/staging/hipblaslt-bench``, ``<build dir>/library/
MatchTable.yaml``, PyYAML and tqdm in the interpreter that runs it, and the data-type
letters the config uses among those the script knows.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .bench import Winner, parse_winner
from .find_exact import Config, FindExactLayout, script_letters

#: ``result_TN_HHS_4096x8192x1x4096.txt``: find_exact.py's file name for one size.
RESULT_FILE = re.compile(r"^result_(?P<ta>[NT])(?P<tb>[NT])_(?P<type>\w+?)_"
                         r"(?P<m>\d+)x(?P<n>\d+)x(?P<b>\d+)x(?P<k>\d+)\.txt$")


def missing(layout: FindExactLayout, configs: list[Config],
            python: str = sys.executable) -> list[str]:
    """What find_exact.py would stop at, one line each; empty when it can run."""
    lines: list[str] = []
    if not layout.script.is_file():
        lines.append(f"no find_exact.py at {layout.script} ({layout.origin})")
    if not os.access(layout.bench, os.X_OK):
        lines.append(f"no hipblaslt-bench at {layout.bench}: find_exact.py runs "
                     "<build dir>/clients/staging/hipblaslt-bench")
    if not layout.match_table.is_file():
        lines.append(f"no {layout.match_table}: find_exact.py's CreateLogic step reads "
                     "<build dir>/library/MatchTable.yaml")
    probe = subprocess.run([python, "-c", "import yaml, tqdm"], capture_output=True,
                           text=True, check=False)
    if probe.returncode != 0:
        lines.append(f"{python} cannot import yaml and tqdm, which find_exact.py needs "
                     f"({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ''})")
    if layout.script.is_file():
        known = script_letters(layout.script)
        for config in configs:
            unknown = sorted(set(config.problem_type.letters()) - known)
            if unknown:
                lines.append(
                    f"{config.path.name}: {layout.script} knows the data types "
                    f"{', '.join(sorted(known)).upper()} (its dataType2Bench), not "
                    f"{', '.join(unknown).upper()}: use a find_exact.py that has them "
                    "(ROCm/rocm-libraries projects/hipblaslt/utilities)")
    return lines


def output_dir(out: Path, config: Config) -> Path:
    """Where find_exact.py writes for one config: ``<out>/<config name>/``."""
    return out / config.path.stem


#: find_exact.py's own output and the bench's standard error, in the order they came.
LOG = "find_exact.log"
_RUNNING = re.compile(r"^--Running size: (?P<file>result_\S+\.txt)$")


def run(layout: FindExactLayout, config: Config, out: Path, timeout_s: float,
        python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    """``python3 find_exact.py CONFIG BUILD_DIR OUT`` (its own argument order), its output
    kept in OUT/find_exact.log. find_exact.py sends only the bench's standard output to the
    result file; what the bench says on standard error (why it stopped) comes through here,
    after find_exact.py's ``--Running size: <file>`` line, unbuffered to keep the order."""
    target = output_dir(out, config).resolve()
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([python, str(layout.script), str(config.path.resolve()),
                           str(layout.build_dir), str(target)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False,
                          timeout=max(timeout_s, 1), cwd=target,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    (target / LOG).write_text(done.stdout or "")
    return done


def said_per_size(log: str) -> dict[str, list[str]]:
    """result file name -> the lines printed while find_exact.py ran the bench for it."""
    said: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in log.splitlines():
        started = _RUNNING.match(line.strip())
        if started:
            current = said.setdefault(started["file"], [])
        elif line.startswith(("Creating exact logic", "--Reading")):
            current = None
        elif current is not None and line.strip():
            current.append(line.strip())
    return said


@dataclass(frozen=True)
class SizeResult:
    """One size's result file: the winner, or why there is none (the bench's last lines)."""

    file: Path
    transA: str
    transB: str
    m: int
    n: int
    batch_count: int
    k: int
    winner: Winner | None
    tail: tuple[str, ...]


def read_results(directory: Path) -> list[SizeResult]:
    """Every result file find_exact.py left under ``directory/0_Bench``; a size with no
    winner carries the last lines the bench printed for it (in the file, else in the log)."""
    log = directory / LOG
    said = said_per_size(log.read_text(errors="replace")) if log.is_file() else {}
    results = []
    for path in sorted((directory / "0_Bench").glob("result_*.txt")):
        named = RESULT_FILE.match(path.name)
        if named is None:
            continue
        text = path.read_text(errors="replace")
        winner = parse_winner(text)
        lines = [line for line in text.strip().splitlines() if line.strip()] \
            or said.get(path.name, [])
        tail = tuple(lines[-3:])
        results.append(SizeResult(path, named["ta"], named["tb"], int(named["m"]),
                                  int(named["n"]), int(named["b"]), int(named["k"]), winner,
                                  () if winner else tail))
    return results
