"""``imagebuild report A.json [B.json ...]``: compare validation reports side by side.

Prints a table of the key figures (GEMM and attention TFLOP/s, collective bus bandwidth,
train tokens/s, TFLOP/s, MFU and memory, and every check's status), with the ratio B/A
for two reports, and writes a PNG plot of the numeric figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from imagebuild.validate.checks.report import utc_now
from imagebuild.validate.compare import comparison_rows, label, load_report, plot


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
    table = Table(title="imagebuild validate: comparison")
    table.add_column("figure", style="bold")
    for i, text in enumerate(labels, start=1):
        table.add_column(f"{i}: {escape(text)}", justify="right", overflow="fold")
    if len(reports) == 2:
        table.add_column("2 / 1", justify="right")
    for title, cells in comparison_rows(reports):
        table.add_row(escape(title), *(escape(c) for c in cells))
    console = Console()
    console.print(table)
    if not args.no_plot:
        path = args.plot or Path("reports") / (
            f"compare-{utc_now().strftime('%Y%m%dT%H%M%SZ')}.png")
        plot(reports, labels, path)
        console.print(f"plot: {path}")
    return 0
