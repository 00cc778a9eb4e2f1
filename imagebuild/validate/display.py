"""Terminal rendering of validation progress and results (host side, rich)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

    from rich.status import Status

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from imagebuild.inimage.run_report import verdict_line, workload_notes

STATUS_STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}
STATUS_MARK = {"passed": "ok", "failed": "FAIL", "skipped": "skip"}


class CheckProgress:
    """Live progress while the checks run: a spinner naming the running check and one
    line per finished check. Output that is not an event (warnings) is shown dimmed."""

    def __init__(self, console: Console):
        self.console = console
        self._status: Status | None = None

    def __enter__(self) -> Self:
        self._status = self.console.status("starting the checks ...")
        self._status.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._status is not None:
            self._status.__exit__(exc_type, exc, traceback)

    def on_event(self, event: Mapping[str, Any]) -> None:
        kind = event.get("event")
        if kind == "start":
            self.console.print(
                f"[bold]validating[/] {event.get('host')}: {event.get('mode')} mode, "
                f"{event.get('world_size')} rank(s), checks: {', '.join(event.get('checks', []))}")
        elif kind == "check_started" and self._status is not None:
            self._status.update(f"[{event['index']}/{event['total']}] {event['name']} ...")
        elif kind == "check_finished":
            result = event["result"]
            style = STATUS_STYLE.get(result["status"], "")
            self.console.print(
                f"  [{style}]{STATUS_MARK.get(result['status'], result['status']):>4}[/] "
                f"{result['name']:<12} {result['duration_s']:6.1f}s  {escape(result['reason'])}")

    def on_line(self, line: str) -> None:
        if line.strip():
            self.console.print(f"[dim]{escape(line)}[/]", highlight=False)


def results_table(report: Mapping[str, Any]) -> Table:
    title = (f"{report.get('image') or report.get('host')}: {report.get('mode')} mode, "
             f"{report.get('world_size')} rank(s) on {report.get('nodes')} node(s)"
             + (f", {report['gpu_model']}" if report.get("gpu_model") else ""))
    table = Table(title=title, show_lines=False, expand=False)
    table.add_column("check", style="bold")
    table.add_column("status")
    table.add_column("time", justify="right")
    table.add_column("result", overflow="fold")
    for check in report["checks"]:
        style = STATUS_STYLE.get(check["status"], "")
        table.add_row(check["name"], f"[{style}]{check['status']}[/]",
                      f"{check['duration_s']:.1f}s", escape(check["reason"]))
    return table


def print_results(console: Console, report: Mapping[str, Any]) -> None:
    console.print(results_table(report))
    for note in workload_notes(report):
        console.print(f"[yellow]{escape(note)}[/]")
    line = verdict_line(report)
    console.print(f"[{'green' if report['summary']['exit_code'] == 0 else 'bold red'}]"
                  f"{escape(line)}[/]")
