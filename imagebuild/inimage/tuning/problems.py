"""A GEMM problem in hipBLASLt terms, aggregated occurrences, and the problems CSV.

Standard library only: the image runs it (``imagebuild tune shapes`` there) and the host
imports it directly (``imagebuild.tune.problem`` raises its errors as TuneError).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from .bench import PROBLEM_COLUMNS
from .csv_files import write_rows


class ProblemError(ValueError):
    """Tuning input (trace, log, CSV, bundle) is unusable; the message names where."""


#: torch dtype names (profiler "Input type", TunableOp TypeName) -> hipBLASLt datatype.
HIPBLASLT_TYPES = {
    "c10::BFloat16": "bf16_r", "BFloat16": "bf16_r", "bfloat16": "bf16_r",
    "c10::Half": "f16_r", "Half": "f16_r", "float16": "f16_r",
    "float": "f32_r", "float32": "f32_r", "tf32": "f32_r",
    "double": "f64_r", "float64": "f64_r",
}


def compute_type_for(data_type: str) -> str:
    """Accumulation type PyTorch asks for: f32 for bf16/f16/f32, f64 for f64."""
    return "f64_r" if data_type == "f64_r" else "f32_r"


@dataclass(frozen=True)
class GemmProblem:
    """``hipblaslt-bench -m M -n N -k K --transA TA --transB TB --batch_count B ...``."""

    m: int
    n: int
    k: int
    batch_count: int = 1
    trans_a: str = "N"
    trans_b: str = "N"
    a_type: str = "bf16_r"
    b_type: str = "bf16_r"
    c_type: str = "bf16_r"
    d_type: str = "bf16_r"
    compute_type: str = "f32_r"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k * self.batch_count

    def row_major(self) -> tuple[int, int, int]:
        """(M, N, K) of the row-major ``out[M, N] = mat1[M, K] @ mat2[K, N]`` PyTorch sees."""
        return self.n, self.m, self.k

    def label(self) -> str:
        return (f"m={self.m} n={self.n} k={self.k} b={self.batch_count} "
                f"{self.trans_a}{self.trans_b} {self.a_type}")


@dataclass(frozen=True)
class ProblemStat:
    """How often a problem ran and how long it took in total (None: not measured)."""

    problem: GemmProblem
    count: int
    time_us: float | None = None
    origin: str = ""


def aggregate(stats: Iterable[ProblemStat]) -> list[ProblemStat]:
    """Merge equal problems; sorted by total time (when known), else by count x FLOPs."""
    merged: dict[GemmProblem, ProblemStat] = {}
    for stat in stats:
        old = merged.get(stat.problem)
        if old is None:
            merged[stat.problem] = stat
            continue
        time = None if old.time_us is None and stat.time_us is None else \
            (old.time_us or 0.0) + (stat.time_us or 0.0)
        origins = ",".join(sorted({*old.origin.split(","), *stat.origin.split(",")} - {""}))
        merged[stat.problem] = replace(old, count=old.count + stat.count, time_us=time,
                                       origin=origins)
    return sorted(merged.values(), key=_importance, reverse=True)


def _importance(stat: ProblemStat) -> tuple[float, float]:
    return (stat.time_us or 0.0, float(stat.count * stat.problem.flops))


def time_shares(stats: list[ProblemStat]) -> list[float | None]:
    total = sum(s.time_us or 0.0 for s in stats)
    return [None if s.time_us is None or total <= 0 else s.time_us / total for s in stats]


def write_csv(stats: list[ProblemStat], path: Path) -> None:
    """The problems CSV (PROBLEM_COLUMNS); written to a temporary name, then renamed."""
    write_rows(path, PROBLEM_COLUMNS, (
        [stat.problem.m, stat.problem.n, stat.problem.k, stat.problem.batch_count,
         stat.problem.trans_a, stat.problem.trans_b, stat.problem.a_type, stat.problem.b_type,
         stat.problem.c_type, stat.problem.d_type, stat.problem.compute_type, stat.count,
         "" if share is None else f"{share:.6f}",
         "" if stat.time_us is None else f"{stat.time_us:.3f}", stat.origin]
        for stat, share in zip(stats, time_shares(stats), strict=True)))


def read_csv(path: Path) -> list[ProblemStat]:
    """A problems CSV; errors name the file, line and column."""
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read problems CSV: {exc.strerror}") from exc
    stats: list[ProblemStat] = []
    with handle:
        reader = csv.DictReader(handle)
        missing = [c for c in PROBLEM_COLUMNS[:12] if c not in (reader.fieldnames or [])]
        if missing:
            raise ProblemError(f"{path}:1: missing column(s) {', '.join(missing)}\n"
                            "hint: write it with `imagebuild tune shapes`")
        for line, row in enumerate(reader, start=2):
            stats.append(_row_to_stat(path, line, row))
    return stats


def _row_to_stat(path: Path, line: int, row: dict[str, str]) -> ProblemStat:
    def integer(column: str) -> int:
        try:
            value = int(row[column])
        except (TypeError, ValueError):
            raise ProblemError(f"{path}:{line}: {column}: expected a positive integer, "
                            f"got {row[column]!r}") from None
        if value < 1:
            raise ProblemError(f"{path}:{line}: {column}: expected a positive integer, got {value}")
        return value

    for column in ("transA", "transB"):
        if row[column] not in ("N", "T"):
            raise ProblemError(f"{path}:{line}: {column}: expected N or T, got {row[column]!r}")
    problem = GemmProblem(integer("m"), integer("n"), integer("k"), integer("batch_count"),
                          row["transA"], row["transB"], row["a_type"], row["b_type"],
                          row["c_type"], row["d_type"], row["compute_type"])
    time = row.get("time_us") or ""
    return ProblemStat(problem, integer("count"), float(time) if time else None,
                       row.get("origin") or "")
