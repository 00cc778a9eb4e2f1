"""Side-by-side comparison of validation reports (two images, or AMD vs NVIDIA) and a plot.

The key figures are what decides whether an image is worth its allocation: GEMM and
attention throughput against peak, collective bus bandwidth at the FSDP sizes, and the
training step's tokens/s, TFLOP/s, MFU and memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError


@dataclass(frozen=True)
class KeyFigure:
    label: str
    unit: str
    get: Callable[[Mapping[str, Any]], Any]
    plot: bool = True  # numeric and worth a bar


def _check(report: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    for check in report.get("checks", []):
        if check.get("name") == name:
            return check
    return {}


def _figure(name: str, *path: str) -> Callable[[Mapping[str, Any]], Any]:
    def get(report: Mapping[str, Any]) -> Any:
        value: Any = _check(report, name).get("figures", {})
        for key in path:
            if not isinstance(value, Mapping):
                return None
            value = value.get(key)
        return value
    return get


def _percent(name: str, key: str) -> Callable[[Mapping[str, Any]], Any]:
    def get(report: Mapping[str, Any]) -> Any:
        value = _figure(name, key)(report)
        return round(value * 100, 1) if isinstance(value, (int, float)) else None
    return get


def _fsdp(op: str, size: int) -> Callable[[Mapping[str, Any]], Any]:
    return _figure("collectives", "fsdp_sizes", f"{op}_{size}")


KEY_FIGURES: tuple[KeyFigure, ...] = (
    KeyFigure("GPU", "", lambda r: r.get("gpu_model") or ("CPU" if r.get("mode") == "cpu"
                                                           else None), plot=False),
    KeyFigure("ranks x nodes", "", lambda r: f"{r.get('world_size')} x {r.get('nodes')}",
              plot=False),
    KeyFigure("torch", "", lambda r: (r.get("versions") or {}).get("torch"), plot=False),
    KeyFigure("peak bf16", "TFLOP/s", lambda r: r.get("peak_bf16_tflops"), plot=False),
    KeyFigure("GEMM", "TFLOP/s", _figure("gemm", "tflops")),
    KeyFigure("GEMM of peak", "%", _percent("gemm", "fraction_of_peak")),
    KeyFigure("attention backend", "", _figure("attention", "default_backend"), plot=False),
    KeyFigure("attention fwd+bwd", "TFLOP/s", _figure("attention", "fwd_bwd_tflops")),
    KeyFigure("attention bwd/fwd time", "x", _figure("attention", "bwd_fwd_time_ratio")),
    KeyFigure("all_reduce busbw", "GB/s", _figure("collectives", "busbw_gbps_at_largest",
                                                  "all_reduce")),
    KeyFigure("all_gather 151003136 B", "GB/s", _fsdp("all_gather", 151003136)),
    KeyFigure("reduce_scatter 302006272 B", "GB/s", _fsdp("reduce_scatter", 302006272)),
    KeyFigure("network", "", _figure("network", "network"), plot=False),
    KeyFigure("train layers x seq", "", lambda r: (
        f"{_figure('train', 'layers')(r)} x {_figure('train', 'seq')(r)}"
        if _figure("train", "layers")(r) else None), plot=False),
    KeyFigure("train tokens/s/GPU", "tokens/s", _figure("train", "tokens_per_s_per_gpu")),
    KeyFigure("train TFLOP/s/GPU", "TFLOP/s", _figure("train", "tflops_per_gpu")),
    KeyFigure("train MFU", "%", _percent("train", "mfu")),
    KeyFigure("train peak memory", "GiB", _figure("train", "peak_memory_gib")),
)


def schema() -> dict[str, Any]:
    text = resources.files("imagebuild").joinpath("data/validate-report.schema.json").read_text()
    return json.loads(text)


def load_report(path: Path) -> dict[str, Any]:
    """A report file, checked against the report schema."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValidateError(f"{path}: cannot read report ({exc.strerror})") from exc
    except ValueError as exc:
        raise ValidateError(f"{path}: not JSON: {exc}") from exc
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise ValidateError(f"{path}: not a validation report: {where}: {first.message}{more}")
    return data


def label(report: Mapping[str, Any], path: Path) -> str:
    name = report.get("image") or report.get("recipe") or path.stem
    gpu = report.get("gpu_model") or ("CPU" if report.get("mode") == "cpu" else "?")
    return f"{name} ({gpu})"


def comparison_rows(reports: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """(figure label with unit, formatted value per report), then each check's status."""
    rows: list[tuple[str, list[str]]] = []
    for figure in KEY_FIGURES:
        values = [figure.get(r) for r in reports]
        if all(v is None for v in values):
            continue
        title = f"{figure.label} [{figure.unit}]" if figure.unit else figure.label
        cells = [_format(v) for v in values]
        numeric = [v for v in values if isinstance(v, (int, float))]
        if len(reports) == 2 and len(numeric) == 2 and numeric[0]:
            cells.append(f"{numeric[1] / numeric[0]:.2f}x")
        elif len(reports) == 2:
            cells.append("")
        rows.append((title, cells))
    names = []
    for report in reports:
        for check in report.get("checks", []):
            if check["name"] not in names:
                names.append(check["name"])
    for name in names:
        cells = [(_check(r, name).get("status") or "-") for r in reports]
        rows.append((f"check {name}", cells + ([""] if len(reports) == 2 else [])))
    return rows


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)


def plot(reports: Sequence[Mapping[str, Any]], labels: Sequence[str], path: Path) -> Path:
    """A PNG with one bar chart per numeric key figure, one bar per report."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ValidateError("the comparison plot needs matplotlib: pip install "
                            "'imagebuild[report]' (or pass --no-plot)") from exc
    matplotlib.use("Agg")  # no display on clusters and CI
    import matplotlib.pyplot as plt

    figures = [f for f in KEY_FIGURES if f.plot
               and any(isinstance(f.get(r), (int, float)) for r in reports)]
    if not figures:
        raise ValidateError("the reports hold no numeric figure to plot (every GPU check "
                            "skipped and no train step?)")
    columns = min(3, len(figures))
    rows = (len(figures) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, figure in zip(axes.flat, figures, strict=False):
        values = [figure.get(r) for r in reports]
        heights = [v if isinstance(v, (int, float)) else 0 for v in values]
        bars = ax.bar(range(len(reports)), heights,
                      color=[colors[i % len(colors)] for i in range(len(reports))])
        for bar, value in zip(bars, values, strict=True):
            ax.annotate(_format(value), (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_title(figure.label, fontsize=10)
        ax.set_ylabel(figure.unit, fontsize=8)
        ax.set_xticks(range(len(reports)))
        ax.set_xticklabels([str(i + 1) for i in range(len(reports))], fontsize=8)
        ax.margins(y=0.15)
    for ax in list(axes.flat)[len(figures):]:
        ax.set_visible(False)
    legend = [f"{i + 1}: {text}" for i, text in enumerate(labels)]
    fig.suptitle("imagebuild validate: " + "  |  ".join(legend), fontsize=9)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path
