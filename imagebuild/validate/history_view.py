"""A system's figures over time, from its history file, with runs outside their band flagged.

Each run's figure is compared with the earlier runs of the same setup only (system, GPU,
mode, ranks, nodes; for train and Megatron figures also the train configuration, as
``imagebuild report`` compares tokens/s) that were not flagged below their own band: the
band is
their median plus or minus the larger of MAD_WIDTH scaled median absolute deviations and
a tolerance (default 5 %) of the median, and a value outside it is flagged. A band needs
MIN_EARLIER such runs; before that a run is shown, not judged.

Why this rule: the old band (the earlier values' whole range, +-5 %) moved with every
outlier it took in, and judged a run against a single earlier one, so two runs of one
image on one H200 flagged gemm.worst_shape_tflops 562.6 against 567.4..627.1. A median
and the median absolute deviation are not pulled by one bad run (Leys et al., "Detecting
outliers: Do not use standard deviation around the mean, use absolute deviation around
the median", J. Exp. Soc. Psychol. 49 (2013), https://doi.org/10.1016/j.jesp.2013.03.013,
who propose 2.5 to 3 scaled MADs; 3 here, the conservative end, since a flag is a
regression alarm); the tolerance floor keeps a few nearly identical runs (MAD near 0)
from flagging the next run's ordinary noise; runs flagged below stay out of later bands so
a regression does not lower the bar that should catch the next one (it stays flagged until
it is fixed; a system that is slower for good starts a new history file), while runs above
their band join later ones, so an image that is faster for good becomes the new normal
after a few runs instead of being flagged forever; and two earlier runs are the fewest that
show what a setup does rather than what one run happened to do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.history import read_history
from imagebuild.inimage.model.train_config import comparison_key

DEFAULT_TOLERANCE = 0.05
#: Half-width of the band in scaled MADs (see the module's docstring).
MAD_WIDTH = 3.0
#: The MAD times this estimates a normal distribution's standard deviation.
MAD_TO_SIGMA = 1.4826
#: Earlier runs of the same setup (not flagged below) a band needs.
MIN_EARLIER = 2


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


def band_of(earlier: Sequence[float], tolerance: float) -> tuple[float, float]:
    """Median +- max(MAD_WIDTH scaled MADs, tolerance of the median) of ``earlier``."""
    center = median(earlier)
    mad = median([abs(v - center) for v in earlier]) * MAD_TO_SIGMA
    half = max(MAD_WIDTH * mad, tolerance * abs(center))
    return center - half, center + half


def series(records: Sequence[Mapping[str, Any]], figure: str,
           tolerance: float = DEFAULT_TOLERANCE) -> list[Point]:
    points: list[Point] = []
    for index, record in enumerate(records):
        value = (record.get("figures") or {}).get(figure)
        key = setup_key(record, figure)
        earlier = [float(point.value) for point, r in zip(points, records, strict=False)
                   if point.value is not None and point.flag != "below"
                   and setup_key(r, figure) == key]
        band = band_of(earlier, tolerance) if len(earlier) >= MIN_EARLIER else None
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
    digest = record.get("fingerprint")
    loaded = f", libraries {digest.removeprefix('sha256:')[:12]}" if digest else ""
    return (f"{record.get('created') or '?'} {record.get('system') or '?'} "
            f"{record.get('gpu_model') or record.get('mode') or '?'} x{record.get('world_size')}"
            f": {image}{torch}{loaded}")


def flag_notes(records: Sequence[Mapping[str, Any]], figures: Sequence[str],
               tolerance: float) -> list[str]:
    notes = []
    for figure in figures:
        for point in series(records, figure, tolerance):
            if point.flag and point.band and point.value is not None:
                notes.append(f"run {point.run}: {figure} {point.value:.4g} is {point.flag} the "
                             f"band {point.band[0]:.4g}..{point.band[1]:.4g} of {point.earlier} "
                             f"earlier run(s) of the same setup not flagged below (their median "
                             f"+- max({MAD_WIDTH:g} MAD, {tolerance:.0%}))")
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
