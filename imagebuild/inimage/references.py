"""What a system should do: expected figures with tolerances, and what each figure was
judged against.

A references file names, per GPU model, the figures a system is expected to reach, as
ReFrame's reference tuples do (https://reframe-hpc.readthedocs.io/en/stable/regression_test_api.html,
``reference``: ``(value, lower_thres, upper_thres, unit)``, the thresholds fractions of the
value, ``None`` for unbounded)::

    {"system": "cscs-beverin",
     "gpus": {"MI300A": {"gemm.tflops": [520.0, -0.10, null, "TFLOP/s"],
                         "train.mfu": [0.24, -0.15, 0.30, null]},
              "*": {"collectives.busbw_gbps_at_largest.all_reduce": [95.0, -0.2, null, "GB/s"]}}}

A figure is ``<check>.<key>[.<key>...]`` into that check's figures. "*" applies to every
GPU; "cpu" to CPU-mode runs. Where a reference covers a figure that the check otherwise
judges against a generic floor of gpus.json (gemm's ``gemm_min_fraction``, train's
``train_min_mfu``, ...), the reference replaces that floor; every other figure keeps its
floor. The check's figures then list under ``judged_against`` what each judged figure was
held to: the reference (with the system), the floor (with the threshold's name), or nothing.

JSON only: the host converts the YAML a site profile names (standard library here).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from typing import Any

from .across_ranks import PER_RANK_FIGURES, rank_values
from .gpu_data import UsageError
from .history import HISTORY_FIGURES as KEY_FIGURES
from .result import FAILED, INCOMPLETE, PASSED, SKIPPED, CheckResult

ANY_GPU = "*"
CPU_RUNS = "cpu"
TUPLE_FORMAT = "[value, lower, upper, unit], lower/upper fractions of value or null"


@dataclass(frozen=True)
class Reference:
    figure: str
    value: float
    lower: float | None  # fraction of value, <= 0 (-0.1: down to 10 % below)
    upper: float | None  # fraction of value, >= 0
    unit: str | None

    def bounds(self) -> tuple[float | None, float | None]:
        low = None if self.lower is None else self.value * (1 + self.lower)
        high = None if self.upper is None else self.value * (1 + self.upper)
        return low, high

    def holds(self, measured: float) -> bool:
        low, high = self.bounds()
        return ((low is None or measured >= low) and (high is None or measured <= high)
                and not math.isnan(measured))

    def describe(self) -> str:
        low, high = self.bounds()
        unit = f" {self.unit}" if self.unit else ""
        span = (f"{_fmt(low) if low is not None else '-inf'}..."
                f"{_fmt(high) if high is not None else 'inf'}")
        return f"{_fmt(self.value)}{unit} ({span})"

    def to_list(self) -> list[Any]:
        return [self.value, self.lower, self.upper, self.unit]


@dataclass(frozen=True)
class References:
    system: str
    source: str | None  # the document's own "source" text: where its figures come from
    by_gpu: Mapping[str, Mapping[str, Reference]]
    #: The user's file: the path as given and the sha256 of its bytes. The host hands the
    #: runner a JSON copy, with these under "file", so the report names the original.
    file: str | None = None
    sha256: str | None = None

    def provenance(self) -> dict[str, Any]:
        return {"path": self.file, "sha256": self.sha256}

    def for_gpu(self, model: str | None, cpu: bool) -> dict[str, Reference]:
        """The references for one device: "*" first, then its own model's (or "cpu")."""
        chosen = dict(self.by_gpu.get(ANY_GPU, {}))
        key = CPU_RUNS if cpu else model
        if key:
            chosen.update(self.by_gpu.get(key, {}))
        return chosen


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def parse_references(raw: Any, where: str) -> References:
    """Check a references document; every problem raises UsageError naming its key."""
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where}: expected a mapping with 'system' and 'gpus'")
    unknown = sorted(set(raw) - {"system", "gpus", "source", "file"})
    if unknown:
        raise UsageError(f"{where}: {unknown[0]}: unknown key (expected system, gpus, source)")
    file = raw.get("file")
    if file is not None and not (isinstance(file, Mapping)
                                 and isinstance(file.get("path"), str)
                                 and isinstance(file.get("sha256"), str)):
        raise UsageError(f"{where}: file: expected {{path, sha256}} of the original file "
                         "(imagebuild validate writes it; leave it out of your own file)")
    system = raw.get("system")
    if not isinstance(system, str) or not system.strip():
        raise UsageError(f"{where}: system: expected the system's name, like cscs-beverin")
    gpus = raw.get("gpus")
    if not isinstance(gpus, Mapping) or not gpus:
        raise UsageError(f"{where}: gpus: expected a mapping of GPU model (or '*', 'cpu') to "
                         "figures")
    by_gpu: dict[str, dict[str, Reference]] = {}
    for model, figures in gpus.items():
        if not isinstance(figures, Mapping):
            raise UsageError(f"{where}: gpus.{model}: expected a mapping of figure to "
                             f"{TUPLE_FORMAT}")
        by_gpu[str(model)] = {
            str(figure): _reference(str(figure), value, f"{where}: gpus.{model}.{figure}")
            for figure, value in figures.items()}
    return References(system.strip(), str(raw["source"]) if raw.get("source") else None, by_gpu,
                      file["path"] if file else None, file["sha256"] if file else None)


def _reference(figure: str, value: Any, where: str) -> Reference:
    from . import CHECK_NAMES

    check = figure.split(".", 1)[0]
    if "." not in figure or check not in CHECK_NAMES:
        raise UsageError(f"{where}: expected <check>.<figure> with a check among "
                         f"{', '.join(CHECK_NAMES)}")
    if not isinstance(value, list) or len(value) != 4:
        raise UsageError(f"{where}: expected {TUPLE_FORMAT}, got {value!r}")
    expected, lower, upper, unit = value
    if isinstance(expected, bool) or not isinstance(expected, (int, float)):
        raise UsageError(f"{where}: the value must be a number, got {expected!r}")
    for name, bound, sign in (("lower", lower, -1), ("upper", upper, 1)):
        if bound is None:
            continue
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound * sign < 0:
            raise UsageError(f"{where}: {name} must be null or a fraction of the value "
                             f"{'<= 0' if sign < 0 else '>= 0'} (like {sign * 0.1:+}), got "
                             f"{bound!r}")
    if unit is not None and not isinstance(unit, str):
        raise UsageError(f"{where}: the unit must be a string or null, got {unit!r}")
    return Reference(figure, float(expected), None if lower is None else float(lower),
                     None if upper is None else float(upper), unit)


def load_references(path: str | os.PathLike[str]) -> References:
    file = Path(path)
    try:
        data = file.read_bytes()
        raw = json.loads(data)
    except OSError as exc:
        raise UsageError(f"{file}: cannot read references ({exc.strerror})") from exc
    except ValueError as exc:
        raise UsageError(f"{file}: not valid JSON: {exc} (the in-image runner reads JSON; "
                         "the host CLI also reads YAML)") from exc
    parsed = parse_references(raw, str(file))
    if parsed.file is None:  # read from the user's own file, not the host's copy
        parsed = replace(parsed, file=str(file), sha256=hashlib.sha256(data).hexdigest())
    return parsed


# --- generic floors, and which references replace them -------------------------------------

@dataclass(frozen=True)
class Floor:
    """A figure a check judges against a gpus.json threshold (GPU runs only)."""

    figure: str  # the figure judged, "<check>.<path>"
    threshold: Callable[[Mapping[str, Any]], str]  # its threshold's name, from the figures
    minimum: bool  # the figure must reach the threshold (else stay under it)
    covered_by: tuple[str, ...]  # references that replace this floor


def _key(name: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda figures: name


def _collective_key(figures: Mapping[str, Any]) -> str:
    return ("collective_min_busbw_gbps_multi_node" if (figures.get("nodes") or 1) > 1
            else "collective_min_busbw_gbps")


FLOORS: tuple[Floor, ...] = (
    Floor("gemm.fraction_of_peak", _key("gemm_min_fraction"), True,
          ("gemm.fraction_of_peak", "gemm.tflops")),
    Floor("gemm.worst_shape_fraction_of_peak", _key("gemm_min_fraction_worst_shape"), True,
          ("gemm.worst_shape_fraction_of_peak", "gemm.worst_shape_tflops")),
    Floor("hipblaslt.fraction_of_peak", _key("hipblaslt_min_fraction"), True,
          ("hipblaslt.fraction_of_peak", "hipblaslt.tflops")),
    Floor("attention.fraction_of_peak", _key("attention_min_fraction"), True,
          ("attention.fraction_of_peak", "attention.fwd_bwd_tflops")),
    Floor("attention.bwd_fwd_time_ratio", _key("attention_max_bwd_fwd_ratio"), False,
          ("attention.bwd_fwd_time_ratio",)),
    *(Floor(f"collectives.busbw_gbps_at_largest.{op}", _collective_key, True,
            (f"collectives.busbw_gbps_at_largest.{op}",))
      for op in ("all_reduce", "all_gather", "reduce_scatter")),
    Floor("train.mfu", _key("train_min_mfu"), True,
          ("train.mfu", "train.tflops_per_gpu", "train.tokens_per_s_per_gpu")),
)


def relaxed_thresholds(check: str, thresholds: Mapping[str, float],
                       references: Mapping[str, Reference]) -> dict[str, float]:
    """``thresholds`` with every floor of ``check`` that references replace switched off
    (0 for a minimum, infinity for a maximum). A threshold that also judges a figure no
    reference covers (collectives' one busbw floor for three ops) stays."""
    relaxed = dict(thresholds)
    by_key: dict[str, list[bool]] = {}
    for floor in FLOORS:
        if floor.figure.split(".", 1)[0] != check:
            continue
        for name in {floor.threshold({"nodes": 1}), floor.threshold({"nodes": 2})}:
            by_key.setdefault(name, []).append(
                any(ref in references for ref in floor.covered_by))
    for name, covered in by_key.items():
        if name in relaxed and all(covered):
            minimum = next(f.minimum for f in FLOORS
                           if name in (f.threshold({"nodes": 1}), f.threshold({"nodes": 2})))
            relaxed[name] = 0.0 if minimum else math.inf
    return relaxed


def figure_value(figures: Mapping[str, Any], path: str) -> Any:
    value: Any = figures
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _measured(figures: Mapping[str, Any], path: str) -> list[tuple[int | None, str | None, float]]:
    """Every rank's value of a per-rank figure, else the one job-wide value (rank None)."""
    per_rank = rank_values(figures, path)
    if per_rank:
        return list(per_rank)
    value = figure_value(figures, path)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [(None, None, float(value))]
    return []


def _where(rank: int | None, host: str | None) -> str:
    return "" if rank is None else f" on rank {rank} ({host or '?'})"


def _with_rank(entry: dict[str, Any], value: tuple[int | None, str | None, float],
               values: list[tuple[int | None, str | None, float]]) -> dict[str, Any]:
    """``entry`` holding ``value`` (the one judged), and where it came from when every rank
    measured its own: the rank and host, and the median of all ranks beside it."""
    entry["value"] = value[2]
    if value[0] is not None:
        entry.update(rank=value[0], host=value[1], ranks=len(values),
                     median_of_ranks=round(median([v[2] for v in values]), 6))
    return entry


def _nothing_why(figure: str, figures: Mapping[str, Any], gpu: bool,
                 references: Mapping[str, Reference]) -> str:
    """Why a figure with no reference is judged against nothing."""
    if not gpu:
        return "CPU mode: no peak, no floor, no reference for this figure"
    if figure.startswith("train.") and figures.get("workload") == "proxy":
        return "a proxy run: no reference, and it is not held to the full model's floor"
    own = next((f for f in FLOORS if f.figure == figure), None)
    replacing = [ref for ref in (own.covered_by if own else ()) if ref in references]
    if replacing:
        return f"its floor is replaced by the reference on {replacing[0]}"
    floor = next((f for f in FLOORS if figure in f.covered_by and f.figure != figure), None)
    if floor is None:
        return "no reference and no generic floor for this figure"
    if figure_value(figures, floor.figure.split(".", 1)[1]) is None:
        return f"no reference, and no peak for this GPU, so no floor on {floor.figure}"
    return f"no reference; {floor.figure} is held to its floor instead"


def judge_against_references(result: CheckResult, references: Mapping[str, Reference],
                             thresholds: Mapping[str, float], system: str | None,
                             gpu: bool) -> CheckResult:
    """``result`` with ``judged_against`` in its figures (for each key figure: the
    reference, the floor, or nothing and why) and failed when a figure misses its
    reference. A figure that every rank measures for itself is judged on every rank; the
    entry holds the worst rank's value, with its rank and host."""
    name = result.name
    figures = dict(result.figures)
    entries: list[dict[str, Any]] = []
    misses: list[str] = []
    covered: set[str] = set()
    for figure, reference in sorted(references.items()):
        if figure.split(".", 1)[0] != name:
            continue
        covered.add(figure)
        values = _measured(figures, figure.split(".", 1)[1])
        entry: dict[str, Any] = {"figure": figure, "value": None, "against": "reference",
                                 "system": system, "reference": reference.to_list()}
        if not values:
            entry["verdict"] = "not measured"
            entries.append(entry)
            continue
        outside = [v for v in values if not reference.holds(v[2])]
        low, _ = reference.bounds()
        below = [v for v in outside if low is not None and v[2] < low]
        if below or (not outside and reference.lower is not None):
            worst = min(below or values, key=lambda v: v[2])
        else:
            worst = max(outside or values, key=lambda v: v[2])
        entries.append(_with_rank(entry, worst, values))
        entry["verdict"] = FAILED if outside else PASSED
        unit = f" {reference.unit}" if reference.unit else ""
        misses += [f"{figure} {_fmt(v[2])}{unit}{_where(v[0], v[1])} outside the {system} "
                   f"reference {reference.describe()}" for v in outside[:4]]
        if len(outside) > 4:
            misses.append(f"and {len(outside) - 4} more ranks outside it")
    for floor in FLOORS:
        if floor.figure.split(".", 1)[0] != name:
            continue
        if any(ref in covered for ref in floor.covered_by):
            continue
        values = _measured(figures, floor.figure.split(".", 1)[1])
        if not values:
            continue
        covered.add(floor.figure)
        key = floor.threshold(figures)
        worst = (min if floor.minimum else max)(values, key=lambda v: v[2])
        entry = _with_rank({"figure": floor.figure}, worst, values)
        if not gpu:
            entry.update(against="nothing", why="CPU mode applies no floor")
        elif name == "train" and figures.get("workload") == "proxy":
            entry.update(against="nothing", why="a proxy's MFU is not held to the full "
                                                "model's floor")
        else:
            limit = thresholds.get(key)
            ok = limit is None or (worst[2] >= limit if floor.minimum else worst[2] <= limit)
            entry.update(against="floor", threshold=key, floor=limit,
                         verdict=PASSED if ok else FAILED)
        entries.append(entry)
    per_rank = [f"{name}.{f}" for f in PER_RANK_FIGURES.get(name, {})]
    for figure in dict.fromkeys((*KEY_FIGURES, *per_rank)):
        if figure.split(".", 1)[0] != name or figure in covered:
            continue
        values = _measured(figures, figure.split(".", 1)[1])
        if not values:
            continue
        higher = PER_RANK_FIGURES.get(name, {}).get(figure.split(".", 1)[1], True)
        worst = (min if higher else max)(values, key=lambda v: v[2])
        entries.append(_with_rank({"figure": figure}, worst, values) | {
            "against": "nothing", "why": _nothing_why(figure, figures, gpu, references)})
    if not entries:
        return result
    figures["judged_against"] = entries
    if misses and result.status != FAILED:
        return replace(result, status=FAILED, cause=None, figures=figures,
                       reason="; ".join(misses) + f" (measured: {result.reason})")
    if misses:
        return replace(result, figures=figures, reason=result.reason + "; " + "; ".join(misses))
    used = [e["figure"] for e in entries
            if e["against"] == "reference" and e.get("verdict") == PASSED]
    within = f"within the {system} reference for {', '.join(used)}"
    if used and result.status == PASSED:
        return replace(result, figures=figures, reason=f"{result.reason}; {within}")
    if used and result.status == SKIPPED and result.cause == INCOMPLETE:
        # Not judged for want of a peak, but the system's own reference judges it.
        return replace(result, status=PASSED, cause=None, figures=figures,
                       reason=f"{result.reason.split(', but ')[0]}; {within}")
    return replace(result, figures=figures)
