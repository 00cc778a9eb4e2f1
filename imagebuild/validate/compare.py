"""Side-by-side comparison of validation reports (two images, or AMD vs NVIDIA) and a plot.

The key figures are what decides whether an image is worth its allocation: GEMM and
attention throughput against peak, collective bus bandwidth at the sizes training uses,
and the training step's TFLOP/s, MFU, memory and tokens/s. tokens/s is shown only when
every report trained the same configuration (blocks, sequence, micro-batch, activation
checkpointing, ranks, precision, compile): a 6-block proxy runs several times the tokens/s
of the 32-block model. Otherwise the row says why it is left out, and TFLOP/s per GPU and
MFU, which count the FLOPs of what ran, carry the comparison.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.model.train_config import COMPARISON_KEYS, comparison_key, describe


@dataclass(frozen=True)
class KeyFigure:
    label: str
    unit: str
    get: Callable[[Mapping[str, Any]], Any]
    plot: bool = True  # numeric and worth a bar
    #: The dtype a report measured the figure in, where it varies (bf16 on GPU, float32 in
    #: CPU mode): the label then says the reports' own, not a fixed one.
    dtype: Callable[[Mapping[str, Any]], Any] | None = None

    def title(self, reports: Sequence[Mapping[str, Any]]) -> str:
        if self.dtype is None:
            return self.label
        dtypes = list(dict.fromkeys(d for r in reports if (d := self.dtype(r))))
        return f"{self.label} ({' / '.join(dtypes)})" if dtypes else self.label


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


#: Where reports keep the Megatron bucket sizes' busbw: the current key, then the name
#: older reports used for the same figures.
MEGATRON_KEYS = ("megatron_bucket_sizes", "fsdp_sizes")


def _megatron_bucket(op: str, size: int) -> Callable[[Mapping[str, Any]], Any]:
    def get(report: Mapping[str, Any]) -> Any:
        for key in MEGATRON_KEYS:
            value = _figure("collectives", key, f"{op}_{size}")(report)
            if value is not None:
                return value
        return None
    return get


def _fsdp2_group(op: str, group: str, key: str = "busbw_gbps"
                 ) -> Callable[[Mapping[str, Any]], Any]:
    """``key`` (busbw, or the dtype it was measured in) of the train step's own FSDP2
    collective of ``group`` ("per block" or "root group")."""
    def get(report: Mapping[str, Any]) -> Any:
        for row in _figure("collectives", "training_sizes")(report) or []:
            if row.get("op") == op and str(row.get("source", "")).startswith(f"FSDP2 {group}"):
                return row.get(key)
        return None
    return get


def _fsdp2_figure(label: str, op: str, group: str) -> KeyFigure:
    return KeyFigure(label, "GB/s", _fsdp2_group(op, group),
                     dtype=_fsdp2_group(op, group, "dtype"))


def train_configuration(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    setup = _figure("train", "configuration")(report)
    return setup if isinstance(setup, Mapping) else None


def _train_setup_text(report: Mapping[str, Any]) -> str | None:
    setup = train_configuration(report)
    if setup is None:
        return "not recorded" if _figure("train", "layers")(report) else None
    return f"{setup.get('workload', '?')}: {describe(setup)}"


TOKENS_PER_S = "train tokens/s/GPU"


KEY_FIGURES: tuple[KeyFigure, ...] = (
    KeyFigure("GPU", "", lambda r: r.get("gpu_model") or ("CPU" if r.get("mode") == "cpu"
                                                           else None), plot=False),
    KeyFigure("ranks x nodes", "", lambda r: f"{r.get('world_size')} x {r.get('nodes')}",
              plot=False),
    KeyFigure("torch", "", lambda r: (r.get("versions") or {}).get("torch"), plot=False),
    KeyFigure("peak bf16", "TFLOP/s", lambda r: r.get("peak_bf16_tflops"), plot=False),
    KeyFigure("GEMM", "TFLOP/s", _figure("gemm", "tflops")),
    KeyFigure("GEMM of peak", "%", _percent("gemm", "fraction_of_peak")),
    KeyFigure("GEMM TAF-style", "TFLOP/s", _figure("gemm", "taf_tflops")),
    KeyFigure("attention backend", "", _figure("attention", "default_backend"), plot=False),
    KeyFigure("attention fwd+bwd", "TFLOP/s", _figure("attention", "fwd_bwd_tflops")),
    KeyFigure("attention bwd/fwd time", "x", _figure("attention", "bwd_fwd_time_ratio")),
    KeyFigure("all_reduce busbw", "GB/s", _figure("collectives", "busbw_gbps_at_largest",
                                                  "all_reduce")),
    _fsdp2_figure("FSDP2 block all_gather", "all_gather", "per block"),
    _fsdp2_figure("FSDP2 block reduce_scatter", "reduce_scatter", "per block"),
    _fsdp2_figure("FSDP2 root all_gather", "all_gather", "root group"),
    _fsdp2_figure("FSDP2 root reduce_scatter", "reduce_scatter", "root group"),
    KeyFigure("all_gather 151003136 B", "GB/s", _megatron_bucket("all_gather", 151003136)),
    KeyFigure("reduce_scatter 302006272 B", "GB/s",
              _megatron_bucket("reduce_scatter", 302006272)),
    KeyFigure("network", "", _figure("network", "network"), plot=False),
    KeyFigure("train configuration", "", _train_setup_text, plot=False),
    KeyFigure(TOKENS_PER_S, "tokens/s", _figure("train", "tokens_per_s_per_gpu")),
    KeyFigure("train TFLOP/s/GPU", "TFLOP/s", _figure("train", "tflops_per_gpu")),
    KeyFigure("train MFU (model FLOPs)", "%", _percent("train", "mfu")),
    KeyFigure("train HFU (with recompute)", "%", _percent("train", "hfu")),
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


def tokens_per_s_comparable(reports: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    """(whether tokens/s of the train steps can stand side by side, why not)."""
    ran = [r for r in reports if _figure("train", "tokens_per_s_per_gpu")(r) is not None]
    if len(ran) < 2:
        return True, ""
    recorded = [train_configuration(r) for r in ran]
    setups = [s for s in recorded if s is not None]
    if len(setups) < len(recorded):
        return False, ("tokens/s not compared: a report does not record its train "
                       "configuration; compare TFLOP/s/GPU and MFU")
    keys = [comparison_key(s) for s in setups]
    if all(k == keys[0] for k in keys):
        return True, ""
    differing = [name for i, name in enumerate(COMPARISON_KEYS)
                 if len({k[i] for k in keys}) > 1]
    values = "; ".join(f"{name} " + " vs ".join(str(s.get(name)) for s in setups)
                       for name in differing)
    return False, (f"tokens/s not compared: the train steps differ ({values}); "
                   "TFLOP/s/GPU and MFU count the FLOPs of what ran and compare instead")


def comparison_notes(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why a figure is left out, and which reports' train steps are proxies."""
    notes = []
    comparable, why = tokens_per_s_comparable(reports)
    if not comparable:
        notes.append(why)
    for i, report in enumerate(reports, start=1):
        setup = train_configuration(report) or {}
        if setup.get("workload") == "proxy":
            reason = (_figure("train", "proxy")(report) or {}).get("reason", "")
            notes.append(f"report {i}: the train step is a proxy, not the full model ({reason})")
    return notes


def comparison_rows(reports: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """(figure label with unit, formatted value per report), then each check's status."""
    rows: list[tuple[str, list[str]]] = []
    comparable, _ = tokens_per_s_comparable(reports)
    for figure in KEY_FIGURES:
        values = [figure.get(r) for r in reports]
        if all(v is None for v in values):
            continue
        label = figure.title(reports)
        title = f"{label} [{figure.unit}]" if figure.unit else label
        if figure.label == TOKENS_PER_S and not comparable:
            rows.append((title, ["not compared"] * len(reports)
                         + (["see note"] if len(reports) == 2 else [])))
            continue
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


PLOT_NEEDS_MATPLOTLIB = ("the comparison plot needs matplotlib: pip install 'imagebuild[report]' "
                         "(or pass --no-plot)")


def plot_available() -> bool:
    """Whether matplotlib (the ``report`` extra) imports here."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot(reports: Sequence[Mapping[str, Any]], labels: Sequence[str], path: Path) -> Path:
    """A PNG with one bar chart per numeric key figure, one bar per report."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on clusters and CI
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ValidateError(PLOT_NEEDS_MATPLOTLIB) from exc

    comparable, _ = tokens_per_s_comparable(reports)
    figures = [f for f in KEY_FIGURES if f.plot
               and (comparable or f.label != TOKENS_PER_S)
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
        ax.set_title(figure.title(reports), fontsize=10)
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
