"""A benchmark's record: what it printed and its figures, with the machine it ran on and the
command, written to a file under benchmarks/results/ that is committed, so every figure the
docs quote can be traced to the run that produced it.

    with Recording(path, "squash_bench", tools=("tar2sqfs", "mksquashfs")) as record:
        ...                                   # prints go to the terminal and the record
        record.data["images"] = [...]         # the figures, as data

writes ``<path>.json`` (command, commit, start and end, machine: CPU model, cores, load
average before and after, memory, kernel; tool versions; the figures) and ``<path>.txt``
(the same header, then everything printed), each to a temporary name, then renamed.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TextIO

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

#: How to ask each tool its version: the first line of the output is kept.
VERSION_ARGS = {"tar2sqfs": ["--version"], "mksquashfs": ["-version"], "tar": ["--version"],
                "docker": ["--version"], "sqfs2tar": ["--version"], "git": ["--version"]}


def cpu_model() -> str:
    """``model name`` of /proc/cpuinfo (x86), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine() -> dict[str, Any]:
    """The machine a figure was measured on."""
    return {"cpu_model": cpu_model(), "cpus": os.cpu_count(), "memory_gib": memory_gib(),
            "kernel": platform.release(), "load_average": list(os.getloadavg())}


def tool_version(name: str) -> str | None:
    """The first line ``name`` prints for its version, None when it is not installed."""
    path = shutil.which(name)
    if path is None:
        return None
    done = subprocess.run([path, *VERSION_ARGS.get(name, ["--version"])], capture_output=True,
                          text=True, check=False, timeout=30)
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return lines[0] if lines else f"{path} (no version printed)"


def commit() -> dict[str, Any]:
    """The checkout's commit, and whether it had uncommitted changes."""
    def git(*argv: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *argv], capture_output=True, text=True,
                              check=False).stdout.strip()
    return {"commit": git("rev-parse", "HEAD") or None,
            "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no"))}


class _Tee(io.TextIOBase):
    def __init__(self, *streams: TextIO):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


class Recording:
    """Capture a benchmark's output and figures into ``<path>.json`` and ``<path>.txt``.

    The record is written only when the block ends without an exception: a run that failed
    or was stopped leaves the committed record as it was.
    """

    def __init__(self, path: Path, benchmark: str, tools: tuple[str, ...] = (),
                 argv: list[str] | None = None):
        self.path = path
        self.tools = tools
        self.data: dict[str, Any] = {
            "benchmark": benchmark,
            "command": shlex.join(["python", *(argv if argv is not None else sys.argv)]),
            **commit()}
        self.text = io.StringIO()
        self._stdout: TextIO | None = None

    def __enter__(self) -> Self:
        self.data["started"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.data["machine"] = machine()
        self.data["tools"] = {name: tool_version(name) for name in self.tools}
        self.data["python"] = sys.version.split()[0]
        self._stdout = sys.stdout
        sys.stdout = _Tee(self._stdout, self.text)  # type: ignore[assignment]
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        assert self._stdout is not None
        sys.stdout = self._stdout
        if kind is not None:
            return
        self.data["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.data["machine"]["load_average_after"] = list(os.getloadavg())
        self.write()

    def header(self) -> str:
        m = self.data["machine"]
        tools = ", ".join(f"{k}: {v}" for k, v in self.data["tools"].items())
        return (f"# {self.data['command']}\n"
                f"# commit {self.data['commit']}"
                f"{' (with uncommitted changes)' if self.data['uncommitted_changes'] else ''};"
                f" {self.data['started']} to {self.data.get('finished')}\n"
                f"# {m['cpu_model']}, {m['cpus']} CPUs, {m['memory_gib']} GiB, kernel "
                f"{m['kernel']}; load average {_load(m['load_average'])} before, "
                f"{_load(m.get('load_average_after'))} after\n"
                f"# python {self.data['python']}; {tools}\n")

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for suffix, text in ((".json", json.dumps(self.data, indent=2) + "\n"),
                             (".txt", self.header() + self.text.getvalue())):
            target = self.path.with_suffix(suffix)
            partial = target.with_name(target.name + ".partial")
            partial.write_text(text)
            os.replace(partial, target)
        print(f"record: {self.path.with_suffix('.json')} and .txt")


def _load(values: list[float] | None) -> str:
    return "?" if not values else " ".join(f"{v:.2f}" for v in values)
