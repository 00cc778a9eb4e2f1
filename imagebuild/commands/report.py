"""``imagebuild report A.json [B.json ...]``: compare validation reports side by side.

Prints a table of the key figures (GEMM and attention TFLOP/s, collective bus bandwidth,
the train step's configuration, TFLOP/s, MFU, memory and tokens/s, and every check's
status), with the ratio B/A for two reports, and writes a PNG plot of the numeric figures.
tokens/s is compared only between train steps of the same configuration; otherwise a
note below the table says why it is left out.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

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
from imagebuild.validate.tuning_rows import tuning_rows


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="compare validation reports side by side, with a plot",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json",
                        help="reports written by imagebuild validate")
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="plot path (default ./reports/compare-<time>.png)")
    parser.add_argument("--no-plot", action="store_true", help="print the table only")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

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
