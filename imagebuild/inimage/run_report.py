"""The run's JSON report, its exit code, and the plain-text table printed in an image.

The report's schema is documented in docs/validate-report.md and checked by
imagebuild/data/validate-report.schema.json.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import REPORT_SCHEMA
from .result import FAILED, INCOMPLETE, NO_GPU, PASSED, SKIPPED, CheckResult

#: Lines of the event stream a host reads from stdout start with this.
EVENT_PREFIX = "@@imagebuild-validate "


def utc_now() -> _dt.datetime:
    # datetime.UTC is 3.11+: the checks run on 3.10 too.
    return _dt.datetime.now(_dt.timezone.utc)  # noqa: UP017


def default_report_path(host: str, when: _dt.datetime) -> Path:
    safe_host = re.sub(r"[^A-Za-z0-9_.-]", "_", host)
    return Path("reports") / f"validate-{safe_host}-{when.strftime('%Y%m%dT%H%M%SZ')}.json"


def _cannot_write(directory: Path) -> str | None:
    """Why no file can be created in ``directory`` (made if missing), or None if one can.

    Probed by creating a file: permission bits, a read-only mount (enroot's default root,
    Apptainer's image, ``docker run --read-only``) and a full disk all show up the same way.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def default_report_destination(host: str, when: _dt.datetime) -> tuple[Path, str | None]:
    """Where a report goes when no --report was given, and a note when not the usual place.

    ``./reports/`` when the working directory takes files; else the same name under the
    temporary directory (``$TMPDIR``, else ``/tmp``; enroot mounts a tmpfs there even on a
    read-only root), so a run on a read-only image still keeps its report. When no place
    takes files, the usual path: writing it then fails with the reason.
    """
    preferred = default_report_path(host, when)
    why = _cannot_write(preferred.parent)
    if why is None:
        return preferred, None
    try:
        fallback = Path(tempfile.gettempdir()) / preferred
    except FileNotFoundError:  # no writable temporary directory either
        return preferred, None
    if _cannot_write(fallback.parent) is not None:
        return preferred, None
    return fallback, (f"note: cannot write {preferred.parent}/ here ({why}); the report goes "
                      f"to {fallback} (in a container that directory may vanish with it: "
                      "--report PATH picks a lasting place)")


def exit_code(results: Sequence[CheckResult], allow_cpu: bool) -> int:
    """0 when nothing failed and nothing required was skipped; else 1.

    A GPU check skipped for want of a GPU counts as not done unless --allow-cpu; a check
    that ran but could not be judged (INCOMPLETE, e.g. no peak for this GPU) always does.
    """
    for result in results:
        if result.status == FAILED:
            return 1
        if result.status == SKIPPED and result.cause == INCOMPLETE:
            return 1
        if result.status == SKIPPED and result.cause == NO_GPU and not allow_cpu:
            return 1
    return 0


def build_report(*, results: Sequence[CheckResult], started: _dt.datetime,
                 finished: _dt.datetime, run: Mapping[str, Any], allow_cpu: bool) -> dict[str, Any]:
    """``run`` holds the facts gathered by the runner (hosts, GPUs, versions, ...)."""
    counts = {status: sum(1 for r in results if r.status == status)
              for status in (PASSED, FAILED, SKIPPED)}
    code = exit_code(results, allow_cpu)
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "created": started.isoformat(timespec="seconds"),
        "duration_s": round((finished - started).total_seconds(), 2),
        **run,
        "checks": [r.to_dict() for r in results],
        "summary": {
            **counts,
            "exit_code": code,
            "allow_cpu": allow_cpu,
            "skipped_no_gpu": [r.name for r in results
                               if r.status == SKIPPED and r.cause == NO_GPU],
            "incomplete": [r.name for r in results
                           if r.status == SKIPPED and r.cause == INCOMPLETE],
            "failed_checks": [r.name for r in results if r.status == FAILED],
        },
    }
    return report


def write_report(report: Mapping[str, Any], path: Path) -> Path:
    """Write atomically: a reader (or a job killed mid-write) sees the old or the new file,
    never half of one. The temporary name is unique per process and flushed to disk
    before the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as handle:
            handle.write(json.dumps(report, indent=2, sort_keys=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def workload_notes(report: Mapping[str, Any]) -> list[str]:
    """Lines a reader must not miss beside the table: a train step that was a proxy."""
    notes = []
    for check in report.get("checks", []):
        figures = check.get("figures") or {}
        if check.get("name") == "train" and figures.get("workload") == "proxy":
            proxy = figures.get("proxy") or {}
            notes.append(f"note: the train step ran a PROXY ({proxy.get('layers')} of "
                         f"{proxy.get('full_layers')} blocks), not the full model: its tokens/s "
                         f"are not Llama-3.1-8B's and no MFU threshold was applied. Why: "
                         f"{proxy.get('reason')}")
    return notes


def verdict_line(report: Mapping[str, Any]) -> str:
    summary = report["summary"]
    parts = [f"{summary['passed']} passed", f"{summary['failed']} failed",
             f"{summary['skipped']} skipped"]
    line = ", ".join(parts)
    if summary["exit_code"] == 0:
        return f"validation passed: {line}"
    why = []
    if summary["failed_checks"]:
        why.append("failed: " + ", ".join(summary["failed_checks"]))
    if summary["incomplete"]:
        why.append("not judged: " + ", ".join(summary["incomplete"]))
    if summary["skipped_no_gpu"] and not summary["allow_cpu"]:
        why.append("GPU checks skipped without a GPU (--allow-cpu accepts that): "
                   + ", ".join(summary["skipped_no_gpu"]))
    return f"validation FAILED: {line}; " + "; ".join(why)


def format_table(report: Mapping[str, Any], width: int = 120) -> str:
    """Plain-text table for terminals in images (no rich there)."""
    rows = [(c["name"], c["status"].upper() if c["status"] == FAILED else c["status"],
             f"{c['duration_s']:.1f}s", c["reason"]) for c in report["checks"]]
    name_w = max([len("check")] + [len(r[0]) for r in rows])
    status_w = max([len("status")] + [len(r[1]) for r in rows])
    time_w = max([len("time")] + [len(r[2]) for r in rows])
    reason_w = max(30, width - name_w - status_w - time_w - 6)
    lines = [f"{'check':<{name_w}}  {'status':<{status_w}}  {'time':>{time_w}}  result",
             f"{'-' * name_w}  {'-' * status_w}  {'-' * time_w}  {'-' * min(reason_w, 40)}"]
    for name, status, took, reason in rows:
        wrapped = _wrap(reason, reason_w)
        lines.append(f"{name:<{name_w}}  {status:<{status_w}}  {took:>{time_w}}  {wrapped[0]}")
        indent = " " * (name_w + status_w + time_w + 6)
        lines.extend(indent + more for more in wrapped[1:])
    header = (f"imagebuild validate on {report.get('host')} ({report.get('mode')} mode, "
              f"{report.get('world_size')} rank(s), {report.get('nodes')} node(s)"
              + (f", {report['gpu_model']}" if report.get("gpu_model") else "") + ")")
    notes = [line for note in workload_notes(report) for line in _wrap(note, width)]
    return "\n".join([header, ""] + lines + [""] + notes + [verdict_line(report)])


def _wrap(text: str, width: int) -> list[str]:
    words, lines, current = text.split(), [], ""
    for word in words:
        if current and len(current) + 1 + len(word) > width:
            lines.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(current)
    return lines
