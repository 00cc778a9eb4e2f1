"""``imagebuild report``: the ``tuning`` check's figures as table rows (the bundle, whether it
was in effect, TFLOP/s without -> with it per problem). The check itself is
imagebuild/inimage/checks/tuning_in_effect.py; ``validate --tuning`` wiring is
imagebuild/tune/launch.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _tuning(report: Mapping[str, Any]) -> Mapping[str, Any]:
    for check in report.get("checks", []):
        if check.get("name") == "tuning":
            return check.get("figures") or {}
    return {}


def _problem_key(row: Mapping[str, Any]) -> str:
    return (f"m={row.get('m')} n={row.get('n')} k={row.get('k')} "
            f"{row.get('transA')}{row.get('transB')}")


def tuning_rows(reports: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """Rows for ``imagebuild report``: the bundle, whether it was in effect, the mean
    speed-up, then TFLOP/s without -> with it and the speed-up for each problem."""
    figures = [_tuning(r) for r in reports]
    if not any(figures):
        return []
    pad = [""] if len(reports) == 2 else []
    yes_no: dict[Any, str] = {True: "yes", False: "NO"}
    rows: list[tuple[str, list[str]]] = [
        ("tuning bundle", [str(f.get("bundle") or "-") for f in figures] + pad),
        ("tuning in effect", [yes_no.get(f.get("in_effect"), "-") for f in figures] + pad)]
    means = [f.get("speedup_geomean") for f in figures]
    cells = [f"{m:.3f}x" if isinstance(m, (int, float)) else "-" for m in means]
    if len(reports) == 2:
        before, after = means
        cells.append(f"{after / before:.2f}x"
                     if isinstance(before, (int, float)) and before
                     and isinstance(after, (int, float)) and after else "")
    rows.append(("tuned GEMM speed-up (geometric mean)", cells))
    keys: list[str] = []
    for f in figures:
        for row in f.get("per_problem") or []:
            if _problem_key(row) not in keys:
                keys.append(_problem_key(row))
    for key in keys:
        cells = []
        for f in figures:
            row = next((r for r in f.get("per_problem") or [] if _problem_key(r) == key), None)
            cells.append("-" if row is None else
                         f"{row['before_tflops']:.1f} -> {row['after_tflops']:.1f} "
                         f"({row['speedup']:.2f}x"
                         + (", kernel changed" if row.get("kernel_changed") else "") + ")")
        rows.append((f"tuning {key} [TFLOP/s]", cells + pad))
    return rows
