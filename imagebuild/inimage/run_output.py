"""What the runner says and writes: progress lines (or JSON events for a host), and the
report, rewritten as the run goes. The first write comes before the rendezvous, with what
rank 0 knows alone (versions, node, GPU, the doctor's findings), so a rank that never
arrives, or a collective that hangs, still leaves a report that says so."""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
from pathlib import Path
from typing import Any

from .result import INCOMPLETE, CheckResult, skipped
from .run_report import (
    EVENT_PREFIX,
    build_report,
    default_report_destination,
    format_table,
    utc_now,
    write_report,
)

#: The exit code of a run that could not complete: a rendezvous or collective that failed.
SUITE_FAILED = 2


class Progress:
    """Rank 0's voice: human lines on stderr, or JSON events on stdout for a host."""

    def __init__(self, events: bool, enabled: bool):
        self.events = events
        self.enabled = enabled

    def emit(self, kind: str, **payload: Any) -> None:
        if not self.enabled:
            return
        if self.events:
            sys.stdout.write(EVENT_PREFIX + json.dumps({"event": kind, **payload}) + "\n")
            sys.stdout.flush()
            return
        if kind == "check_started":
            print(f"[{payload['index']}/{payload['total']}] {payload['name']} ...",
                  file=sys.stderr, flush=True)
        elif kind == "check_finished":
            result = payload["result"]
            print(f"      {result['status']} ({result['duration_s']:.1f}s): {result['reason']}",
                  file=sys.stderr, flush=True)


def destination(options: Any, rank: int, host: str, started: _dt.datetime) -> Path | None:
    """Where rank 0 writes the report (None: --report -, or not rank 0)."""
    if options.report == "-" or rank != 0:
        return None
    if options.report:
        return Path(options.report)
    path, note = default_report_destination(host, started)
    if note:
        print(note, file=sys.stderr, flush=True)
    return path


def own_destination(options: Any, rank: int, host: str, started: _dt.datetime) -> Path | None:
    """Where a rank other than 0 writes the report of a run whose rank 0 it never reached:
    the usual path with ``.rank<N>`` before the suffix, so it never overwrites rank 0's."""
    if options.report == "-":
        return None
    base = Path(options.report) if options.report else \
        default_report_destination(host, started)[0]
    return base.with_name(f"{base.stem}.rank{rank}{base.suffix or '.json'}")


def write_partial(facts: dict[str, Any], results: list[CheckResult], pending: list[str],
                  started: _dt.datetime, options: Any, path: Path) -> None:
    """The report so far, so that a run cut short keeps what it found."""
    report = build_report(results=results, started=started, finished=utc_now(),
                          run={**facts, "complete": False, "checks_pending": pending},
                          allow_cpu=options.allow_cpu)
    try:
        write_report(report, path)
    except OSError as exc:
        print(f"warning: cannot write report {path}: {exc.strerror}", file=sys.stderr)


def waiting_entry(world_size: int, master: str, timeout_s: float) -> CheckResult:
    """The report's one entry while rank 0 waits for the others: provisional, replaced by
    the checks once they have all joined."""
    return skipped("rendezvous", INCOMPLETE,
                   f"waiting at {master} for {world_size} ranks (at most {timeout_s:g} s); "
                   "this report is rewritten when they have joined or the wait ends")


def stopped(facts: dict[str, Any], results: list[CheckResult], entry: CheckResult,
            pending: list[str], started: _dt.datetime, options: Any, path: Path | None,
            stopped_by: str) -> int:
    """The run ends before its checks did: the report holds what finished, the entry that
    says why (failed), exit code 2; the table is printed as at the end of a run."""
    report = build_report(results=[*results, entry], started=started, finished=utc_now(),
                          run={**facts, "complete": False, "stopped_by": stopped_by,
                               "checks_pending": pending}, allow_cpu=options.allow_cpu)
    report["summary"]["exit_code"] = SUITE_FAILED
    deliver(report, path, options)
    return SUITE_FAILED


def deliver(report: dict[str, Any], path: Path | None, options: Any) -> bool:
    """Write the final report (when there is a path) and print its table, or send it as
    the last event; False when it could not be written."""
    written = None
    if path is not None:
        try:
            written = write_report(report, path)
        except OSError as exc:
            print(f"error: cannot write report {path}: {exc.strerror}", file=sys.stderr)
    if getattr(options, "events", False):
        Progress(True, True).emit("report", report=report,
                                  path=str(written) if written else None)
    else:
        print(format_table(report), flush=True)
        if written:
            print(f"report: {written}", flush=True)
    return path is None or written is not None


def hard_exit(code: int) -> None:
    """Leave now: after a collective timed out, tearing the process groups down can hang
    on the peer that never came (a gloo or NCCL destructor waiting on it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def finish(options: Any, facts: dict[str, Any], results: list[CheckResult],
           started: _dt.datetime, path: Path | None) -> int:
    from .history import append_history, history_record

    report = build_report(results=results, started=started, finished=utc_now(),
                          run={**facts, "complete": True, "checks_pending": []},
                          allow_cpu=options.allow_cpu)
    code = report["summary"]["exit_code"]
    if options.history:
        try:
            append_history(options.history, history_record(report, report.get("system")))
        except OSError as exc:
            print(f"error: cannot append to history {options.history}: {exc.strerror}",
                  file=sys.stderr)
            code = 2
    if not deliver(report, path, options):
        code = 2
    return code
