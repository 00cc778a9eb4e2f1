"""Pure helpers for hipblaslt-bench offline tuning, shared by the in-image runner and the host.

Standard library only. Sources (hipBLASLt "User Offline Tuning" how-to,
ROCm/hipBLASLt docs/how-to-use-hipblaslt-offline-tuning.rst):
- with ``HIPBLASLT_TUNING_FILE`` set, the bench ends with a ``Winner:`` line, then the CSV
  header (``transA,transB,...,us,solution_index``; spelled ``soulution_index`` in the 6.4
  docs, later builds add ``kernel_name``), then the winner's value row;
- the client itself (clients/include/argument_model.hpp, log_args; testing_matmul.hpp
  prints ``Winner: ``) writes each result as a header line prefixed ``[<result>]:``, the
  value row indented by four spaces and, with ``--print_kernel_info``, the lines
  ``--Solution index: N``, ``--Solution name:`` and ``--kernel name:`` (the form
  utilities/find_exact.py reads back); both forms are read here;
- the tuning/override file starts with ``Git Version: <rev>`` and holds one row per problem:
  the winner's value row followed by the GPU architecture and CU count
  (library/src/amd_detail/rocblaslt/src/UserDrivenTuningParser.cpp reads 37 fields).
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

#: Columns of a problems CSV (written by ``imagebuild tune shapes``).
PROBLEM_COLUMNS = ("m", "n", "k", "batch_count", "transA", "transB", "a_type", "b_type",
                   "c_type", "d_type", "compute_type", "count", "time_share", "time_us",
                   "origin")

GIT_VERSION_PREFIX = "Git Version:"
_SOLUTION_COLUMNS = ("solution_index", "soulution_index")


@dataclass(frozen=True)
class Winner:
    """The best solution hipblaslt-bench found for one problem."""

    header: tuple[str, ...]
    values: tuple[str, ...]

    def field(self, name: str) -> str:
        return self.values[self.header.index(name)]

    @property
    def solution_index(self) -> int:
        for name in _SOLUTION_COLUMNS:
            if name in self.header:
                return int(self.field(name))
        return int(self.values[-1])

    @property
    def gflops(self) -> float:
        return float(self.field("hipblaslt-Gflops"))

    @property
    def us(self) -> float:
        return float(self.field("us"))

    def problem_key(self) -> tuple[int, int, int, int, str, str]:
        return (int(self.field("m")), int(self.field("n")), int(self.field("k")),
                int(self.field("batch_count")), self.field("transA"), self.field("transB"))


_RESULT_PREFIX = re.compile(r"^\[\d+\]:")
_SOLUTION_LINE = re.compile(r"^--Solution index:\s*(?P<index>-?\d+)")


def _cells(line: str) -> tuple[str, ...]:
    line = _RESULT_PREFIX.sub("", line.strip())
    return tuple(cell.strip() for cell in next(csv.reader(io.StringIO(line))))


def parse_winner(output: str) -> Winner | None:
    """The ``Winner:`` block of hipblaslt-bench output, or None when there is none. Without
    a solution-index column, the ``--Solution index:`` line under the row gives it."""
    lines = [line for line in output.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.strip().startswith("Winner:") and i + 2 < len(lines):
            header, values = _cells(lines[i + 1]), _cells(lines[i + 2])
            if "transA" not in header or len(values) != len(header):
                continue
            if not any(name in header for name in _SOLUTION_COLUMNS) and i + 3 < len(lines):
                found = _SOLUTION_LINE.match(lines[i + 3].strip())
                if found:
                    header, values = (*header, "solution_index"), (*values, found["index"])
            return Winner(header, values)
    return None


def parse_results(output: str) -> list[tuple[float, int | None]]:
    """Every (Gflops, solution index) the bench printed for its candidates (heuristic mode
    with ``--print_kernel_info``: a value row, then ``--Solution index: N``)."""
    results: list[tuple[float, int | None]] = []
    header: tuple[str, ...] = ()
    for raw in output.splitlines():
        line = _RESULT_PREFIX.sub("", raw.strip())
        if line.startswith("transA,"):
            header = _cells(line)
        elif line.startswith("--Solution index:") and results:
            results[-1] = (results[-1][0], int(line.split(":", 1)[1]))
        elif header and "," in line:
            cells = _cells(line)
            if len(cells) >= len(header) - 1 and "hipblaslt-Gflops" in header:
                try:
                    results.append((float(cells[header.index("hipblaslt-Gflops")]), None))
                except ValueError:
                    continue
    return results


def override_row(winner: Winner, arch: str, cu_count: int) -> str:
    """One row of an override file: the winner's values, then architecture and CU count."""
    values = list(winner.values)
    if "kernel_name" in winner.header:  # later builds append it after the index
        values = values[: winner.header.index("kernel_name")]
    return ",".join([*values, arch, str(cu_count)])


def override_file_text(git_version: str, rows: list[str]) -> str:
    return "\n".join([f"{GIT_VERSION_PREFIX} {git_version}", *rows]) + "\n"


def read_override_file(text: str) -> tuple[str | None, list[list[str]]]:
    """(git version, data rows) of a tuning/override file; rows without a comma are skipped,
    as the library's parser does."""
    version = None
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith(GIT_VERSION_PREFIX):
            version = line[len(GIT_VERSION_PREFIX):].strip()
        elif "," in line:
            rows.append([cell.strip() for cell in line.split(",")])
    return version, rows


def bench_argv(bench: str, problem: dict[str, str], iters: int, cold_iters: int,
               rotating_mb: int, algo_method: str = "all") -> list[str]:
    """hipblaslt-bench arguments for one problem row (PROBLEM_COLUMNS names)."""
    return [bench, "--api_method", "c", "-m", problem["m"], "-n", problem["n"],
            "-k", problem["k"], "--transA", problem["transA"], "--transB", problem["transB"],
            "--batch_count", problem["batch_count"],
            "--a_type", problem["a_type"], "--b_type", problem["b_type"],
            "--c_type", problem["c_type"], "--d_type", problem["d_type"],
            "--compute_type", problem["compute_type"], "--algo_method", algo_method,
            "-i", str(iters), "-j", str(cold_iters), "--rotating", str(rotating_mb),
            "--print_kernel_info"]


def tunableop_line(problem: dict[str, str]) -> str:
    """The TunableOp untuned-file line for a problem (pytorch/pytorch
    aten/src/ATen/cuda/tunable: op ``GemmTunableOp_<TypeName>_<TA><TB>``, params
    ``<ta><tb>_<m>_<n>_<k>_ld_<lda>_<ldb>_<ldc>`` in BLAS terms; batched:
    ``GemmStridedBatchedTunableOp``, ``..._<k>_B_<batch>_ld_...``)."""
    type_names = {"bf16_r": "BFloat16", "f16_r": "Half", "f32_r": "float", "f64_r": "double"}
    m, n, k, batch = (int(problem[c]) for c in ("m", "n", "k", "batch_count"))
    ta, tb = problem["transA"].upper(), problem["transB"].upper()
    lda = m if ta == "N" else k
    ldb = k if tb == "N" else n
    type_name = type_names[problem["a_type"]]
    layout = f"{ta.lower()}{tb.lower()}"
    if batch > 1:
        return (f"GemmStridedBatchedTunableOp_{type_name}_{ta}{tb},"
                f"{layout}_{m}_{n}_{k}_B_{batch}_ld_{lda}_{ldb}_{m}")
    return f"GemmTunableOp_{type_name}_{ta}{tb},{layout}_{m}_{n}_{k}_ld_{lda}_{ldb}_{m}"
