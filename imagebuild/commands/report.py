"""``imagebuild report A.json [B.json ...]``: compare validation reports side by side.

Prints a table of the key figures (GEMM and attention TFLOP/s, collective bus bandwidth,
the train step's configuration, TFLOP/s, MFU, memory and tokens/s, and every check's
status), with the ratio B/A for two reports, and writes a PNG plot of the numeric figures.
tokens/s is compared only between train steps of the same configuration; otherwise a
note below the table says why it is left out.

``imagebuild report --history FILE`` shows a system's figures over time instead (the file
``imagebuild validate --history FILE`` appends to): one row per run, every run compared
with the earlier runs of the same setup, and a run outside their band flagged. Exit code 1
when the latest run falls below the band of a figure (higher is better for every figure
the history keeps).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.fingerprint import differences
from imagebuild.inimage.run_report import utc_now
from imagebuild.validate.compare import (
    PLOT_NEEDS_MATPLOTLIB,
    comparison_notes,
    comparison_rows,
    label,
    load_report,
    plot,
    plot_available,
)
from imagebuild.validate.history_view import (
    DEFAULT_TOLERANCE,
    figures_in,
    flag_notes,
    load_history,
    plot_history,
    run_label,
    series,
)
from imagebuild.validate.tuning_rows import tuning_rows


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="compare validation reports side by side, with a plot",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="*", type=Path, metavar="REPORT.json",
                        help="reports written by imagebuild validate")
    parser.add_argument("--history", type=Path, default=None, metavar="FILE",
                        help="show this system's history (imagebuild validate --history) "
                             "instead of comparing reports")
    parser.add_argument("--figure", action="append", default=None, metavar="NAME",
                        help="with --history: a figure to show, like gemm.tflops (repeatable; "
                             "default: every figure in the history)")
    parser.add_argument("--band", type=float, default=DEFAULT_TOLERANCE, metavar="FRACTION",
                        help="with --history: the band's least half-width, a fraction of "
                             "the earlier runs' median (the band is their median "
                             "+- max(3 scaled MADs, this); default 0.05)")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="plot path (default ./reports/compare-<time>.png)")
    parser.add_argument("--no-plot", action="store_true", help="print the table only")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if getattr(args, "history", None) is not None:
        if args.reports:
            raise ValidateError("report: give reports to compare or --history FILE, not both")
        return show_history(args)
    if not args.reports:
        raise ValidateError("report: nothing to show", hint="give one or more REPORT.json "
                            "files, or --history FILE")
    reports = [load_report(path) for path in args.reports]
    labels = [label(r, p) for r, p in zip(reports, args.reports, strict=True)]
    console = Console()
    # The reports are named once, in full, above the table: long image names folded into a
    # narrow column header are unreadable.
    for i, text in enumerate(labels, start=1):
        console.print(f"{i}: {escape(text)}", soft_wrap=True)
    table = Table(title="imagebuild validate: comparison")
    table.add_column("figure", style="bold")
    for i in range(1, len(labels) + 1):
        table.add_column(str(i), justify="right")
    if len(reports) == 2:
        table.add_column("2 / 1", justify="right")
    for title, cells in [*comparison_rows(reports), *tuning_rows(reports)]:
        table.add_row(escape(title), *(escape(c) for c in cells))
    console.print(table)
    for note in comparison_notes(reports):
        console.print(f"[yellow]note:[/] {escape(note)}")
    if len(reports) == 2:
        print_fingerprint_differences(console, reports)
    if args.no_plot:
        return 0
    if args.plot is None and not plot_available():
        # The default plot is optional output: the core install prints the table and says
        # why there is no plot; an explicit --plot PATH without matplotlib is an error.
        console.print(f"plot skipped: {escape(PLOT_NEEDS_MATPLOTLIB)}", soft_wrap=True)
        return 0
    path = args.plot or Path("reports") / f"compare-{utc_now().strftime('%Y%m%dT%H%M%SZ')}.png"
    plot(reports, labels, path)
    console.print(f"plot: {path}")
    return 0


SHOWN_RUNS = 10


def print_fingerprint_differences(console: Any, reports: list[dict[str, Any]]) -> None:
    """Beside how the figures differ: what differs in the libraries the two runs loaded."""
    from rich.markup import escape

    first, second = (r.get("fingerprint") for r in reports)
    if not first or not second:
        missing = [str(i) for i, f in ((1, first), (2, second)) if not f]
        console.print(f"fingerprint: report {' and '.join(missing)} has none (written before "
                      "reports carried one)")
        return
    lines = differences(first, second)
    if not lines:
        console.print(f"fingerprint: the same {len(first.get('files', []))} libraries loaded, "
                      "byte for byte, from the same places")
        return
    console.print(f"fingerprint: {len(lines)} difference(s) in the libraries the runs loaded:")
    for line in lines:
        console.print(f"  {escape(line)}", soft_wrap=True)


def show_history(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    records = load_history(args.history)
    available = figures_in(records)
    figures = args.figure or available
    unknown = [f for f in figures if f not in available]
    if unknown:
        raise ValidateError(f"{args.history}: no run has the figure {unknown[0]!r}",
                            hint=f"figures in this history: {', '.join(available) or 'none'}")
    if not 0 <= args.band < 1:
        raise ValidateError(f"--band {args.band}: expected a fraction between 0 and 1")
    console = Console()
    for number, record in enumerate(records, start=1):
        console.print(f"{number}: {escape(run_label(record))}", soft_wrap=True)
    # One row per figure, one column per run (the latest SHOWN_RUNS): figure names are long.
    shown = list(range(max(0, len(records) - SHOWN_RUNS), len(records)))
    table = Table(title=f"imagebuild validate history: {args.history}")
    table.add_column("figure", style="bold")
    for index in shown:
        table.add_column(str(index + 1), justify="right")
    columns = {figure: series(records, figure, args.band) for figure in figures}
    for figure in figures:
        cells = []
        for index in shown:
            point = columns[figure][index]
            text = "-" if point.value is None else f"{point.value:.4g}"
            cells.append(text + (f" {point.flag.upper()}" if point.flag else ""))
        table.add_row(escape(figure), *(escape(c) for c in cells))
    console.print(table)
    if shown[0] > 0:
        console.print(f"runs 1-{shown[0]} not shown (the table shows the latest {SHOWN_RUNS})")
    notes = flag_notes(records, figures, args.band)
    for note in notes:
        console.print(f"[yellow]flagged:[/] {escape(note)}", soft_wrap=True)
    if not notes:
        console.print(f"no run outside the band of its earlier runs (median "
                      f"+- max(3 MAD, {args.band:.0%}))")
    # A regression fails; a latest run above its band is flagged but not a failure.
    latest_regressed = any(columns[f][-1].flag == "below" for f in figures)
    if not args.no_plot:
        if args.plot is None and not plot_available():
            console.print(f"plot skipped: {escape(PLOT_NEEDS_MATPLOTLIB)}", soft_wrap=True)
        else:
            path = args.plot or Path("reports") / (
                f"history-{utc_now().strftime('%Y%m%dT%H%M%SZ')}.png")
            console.print(f"plot: {plot_history(records, figures, path, args.band)}")
    return 1 if latest_regressed else 0
