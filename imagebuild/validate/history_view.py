"""A system's figures over time, from its history file, with runs outside their band flagged.

Each run's figure is compared with the earlier runs of the same setup only (system, GPU,
mode, ranks, nodes; for train and Megatron figures also the train configuration, as
``imagebuild report`` compares tokens/s): the band is the earlier values' range widened by
a tolerance (default 5 %), and a value outside it is flagged. One earlier run is enough
for a band; a run with none starts one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.history import read_history
from imagebuild.inimage.model.train_config import comparison_key

DEFAULT_TOLERANCE = 0.05


@dataclass(frozen=True)
class Point:
    run: int  # 1-based position in the file
    value: float | None
    band: tuple[float, float] | None  # from the earlier runs of the same setup
    earlier: int  # how many earlier runs made the band
    flag: str | None  # "below" or "above" the band


def load_history(path: Path) -> list[dict[str, Any]]:
    try:
        records = read_history(path)
    except OSError as exc:
        raise ValidateError(f"{path}: cannot read the history ({exc.strerror})",
                            hint="imagebuild validate --history FILE writes one") from exc
    except ValueError as exc:
        raise ValidateError(str(exc)) from exc
    if not records:
        raise ValidateError(f"{path}: the history holds no run yet",
                            hint="imagebuild validate --history FILE appends one per run")
    return records


def setup_key(record: Mapping[str, Any], figure: str) -> tuple[Any, ...]:
    base = (record.get("system"), record.get("gpu_model"), record.get("mode"),
            record.get("world_size"), record.get("nodes"))
    if figure.split(".", 1)[0] in ("train", "megatron"):
        return (*base, comparison_key(record.get("train_configuration") or {}))
    return base


def series(records: Sequence[Mapping[str, Any]], figure: str,
           tolerance: float = DEFAULT_TOLERANCE) -> list[Point]:
    points: list[Point] = []
    for index, record in enumerate(records):
        value = (record.get("figures") or {}).get(figure)
        key = setup_key(record, figure)
        earlier = [float(r["figures"][figure]) for r in records[:index]
                   if setup_key(r, figure) == key
                   and isinstance((r.get("figures") or {}).get(figure), (int, float))]
        band = ((min(earlier) * (1 - tolerance), max(earlier) * (1 + tolerance))
                if earlier else None)
        flag = None
        if band is not None and isinstance(value, (int, float)):
            flag = "below" if value < band[0] else "above" if value > band[1] else None
        points.append(Point(index + 1, value if isinstance(value, (int, float)) else None,
                            band, len(earlier), flag))
    return points


def figures_in(records: Sequence[Mapping[str, Any]]) -> list[str]:
    seen: list[str] = []
    for record in records:
        for name in record.get("figures") or {}:
            if name not in seen:
                seen.append(name)
    return seen


def run_label(record: Mapping[str, Any]) -> str:
    versions = record.get("versions") or {}
    image = record.get("image") or record.get("recipe") or "(no image recorded)"
    torch = f", torch {versions['torch']}" if versions.get("torch") else ""
    return (f"{record.get('created') or '?'} {record.get('system') or '?'} "
            f"{record.get('gpu_model') or record.get('mode') or '?'} x{record.get('world_size')}"
            f": {image}{torch}")


def flag_notes(records: Sequence[Mapping[str, Any]], figures: Sequence[str],
               tolerance: float) -> list[str]:
    notes = []
    for figure in figures:
        for point in series(records, figure, tolerance):
            if point.flag and point.band and point.value is not None:
                notes.append(f"run {point.run}: {figure} {point.value:.4g} is {point.flag} the "
                             f"band {point.band[0]:.4g}..{point.band[1]:.4g} of {point.earlier} "
                             f"earlier run(s) of the same setup (their range +-{tolerance:.0%})")
    return notes


def plot_history(records: Sequence[Mapping[str, Any]], figures: Sequence[str], path: Path,
                 tolerance: float) -> Path:
    """A PNG with one panel per figure: its value per run, flagged runs in red."""
    from imagebuild.validate.compare import PLOT_NEEDS_MATPLOTLIB

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValidateError(PLOT_NEEDS_MATPLOTLIB) from exc
    columns = min(3, len(figures))
    rows = (len(figures) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    for ax, figure in zip(axes.flat, figures, strict=False):
        points = [p for p in series(records, figure, tolerance) if p.value is not None]
        ax.plot([p.run for p in points], [p.value for p in points], marker="o")
        flagged = [p for p in points if p.flag]
        ax.scatter([p.run for p in flagged], [p.value for p in flagged], color="red", zorder=3,
                   label="outside the band")
        last = points[-1] if points else None
        if last is not None and last.band is not None:
            ax.axhspan(last.band[0], last.band[1], alpha=0.15, label="band of the last run")
        ax.set_title(figure, fontsize=9)
        ax.set_xlabel("run", fontsize=8)
        ax.set_xticks([p.run for p in points])
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(figures):]:
        ax.set_visible(False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path
