"""GEMM problems from what the libraries record themselves.

- hipBLASLt with ``HIPBLASLT_LOG_MASK=32`` logs each GEMM as a ready-to-run command
  (``hipblaslt-bench --api_method c -m 1024 -n 512 -k 1024 ... --transA N --transB N
  --batch_count 1 --a_type f16_r ... --compute_type f32_r``; hipBLASLt "User Offline Tuning"
  how-to). Every logged line is one call, so repeated lines count.
- PyTorch TunableOp with ``PYTORCH_TUNABLEOP_RECORD_UNTUNED=1`` writes
  ``tunableop_untuned<device>.csv``; results files have the same first two columns. Format
  (pytorch/pytorch aten/src/ATen/cuda/tunable/TunableGemm.h, GemmCommon.h): op
  ``GemmTunableOp_<type>_<TA><TB>`` (or ``GemmStridedBatchedTunableOp_``), params
  ``<ta><tb>_<m>_<n>_<k>[_B_<batch>][_ld_<lda>_<ldb>_<ldc>]`` in BLAS (column-major) terms;
  torch < 2.6 wrote ``<ta><tb>_<m>_<n>_<k>`` only. Untuned files list each problem once.
  ``GemmAndBiasTunableOp_<type>_<TA><TB>`` (a linear with a bias: hipBLASLt's bias
  epilogue, TunableGemm.h) has the same params; its problem is read as the GEMM it runs,
  with origin ``tunableop-bias``. Other ops (``ScaledGemmTunableOp_`` for FP8, whose
  operand types differ) are skipped and counted, never an abort of the whole file.
"""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

from .problems import HIPBLASLT_TYPES, GemmProblem, ProblemError, ProblemStat, aggregate

_BENCH_FLAGS = {"-m": "m", "--sizem": "m", "-n": "n", "--sizen": "n", "-k": "k",
                "--sizek": "k", "--transA": "transA", "--transB": "transB",
                "--batch_count": "batch_count", "--a_type": "a_type", "--b_type": "b_type",
                "--c_type": "c_type", "--d_type": "d_type", "--compute_type": "compute_type",
                "--precision": "precision", "-r": "precision"}
_TUNABLE_PARAMS = re.compile(
    r"^(?P<ta>[nt])(?P<tb>[nt])_(?P<m>\d+)_(?P<n>\d+)_(?P<k>\d+)(?:_B_(?P<batch>\d+))?"
    r"(?:_ld_\d+_\d+_\d+)?$", re.IGNORECASE)


def parse_bench_line(line: str) -> GemmProblem | None:
    """The problem of one ``hipblaslt-bench ...`` command line; None for other lines."""
    start = line.find("hipblaslt-bench")
    if start < 0:
        return None
    try:
        words = shlex.split(line[start:])
    except ValueError:
        return None
    values: dict[str, str] = {}
    for flag, value in itertools.pairwise(words):
        if flag in _BENCH_FLAGS:
            values[_BENCH_FLAGS[flag]] = value
    if not {"m", "n", "k"} <= values.keys():
        return None
    precision = values.get("precision", "f32_r")
    a_type = values.get("a_type", precision)
    d_type = values.get("d_type", values.get("c_type", a_type))
    compute = values.get("compute_type", "f32_r")
    return GemmProblem(int(values["m"]), int(values["n"]), int(values["k"]),
                       int(values.get("batch_count", "1")), values.get("transA", "N").upper(),
                       values.get("transB", "N").upper(), a_type, values.get("b_type", a_type),
                       values.get("c_type", d_type), d_type,
                       "f32_r" if compute == "xf32_r" else compute)


def problems_from_hipblaslt_log(path: Path) -> list[ProblemStat]:
    text = _read(path)
    stats = [ProblemStat(problem, 1, None, "hipblaslt-log") for line in text.splitlines()
             if (problem := parse_bench_line(line)) is not None]
    if not stats:
        raise ProblemError(f"{path}: no `hipblaslt-bench -m ... -n ... -k ...` line\n"
                        "hint: record with HIPBLASLT_LOG_MASK=32 (and no "
                        "HIPBLASLT_TUNING_OVERRIDE_FILE set, which turns the log off)")
    return aggregate(stats)


#: TunableOp ops whose rows name one GEMM in the params form above.
GEMM_OPS = ("GemmTunableOp_", "GemmStridedBatchedTunableOp_", "GemmAndBiasTunableOp_")


def parse_tunableop_row(op: str, params: str) -> GemmProblem | None:
    """One TunableOp CSV row's problem; None for ops that are not GEMM_OPS or whose
    params do not read."""
    if not op.startswith(GEMM_OPS):
        return None
    parts = op.split("_")
    match = _TUNABLE_PARAMS.match(params.strip())
    if len(parts) != 3 or match is None:
        return None
    data_type = HIPBLASLT_TYPES.get(parts[1])
    if data_type is None:
        return None
    layout = parts[2]
    if layout.upper() != (match["ta"] + match["tb"]).upper():
        return None
    return GemmProblem(int(match["m"]), int(match["n"]), int(match["k"]),
                       int(match["batch"] or 1), layout[0].upper(), layout[1].upper(),
                       data_type, data_type, data_type, data_type,
                       "f64_r" if data_type == "f64_r" else "f32_r")


def problems_from_tunableop_csv(path: Path) -> list[ProblemStat]:
    text = _read(path)
    stats: list[ProblemStat] = []
    skipped: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split(",")
        if len(fields) < 2 or fields[0] == "Validator" or "TunableOp_" not in fields[0]:
            continue
        if not fields[0].startswith(GEMM_OPS):
            kind = fields[0].split("_", 1)[0]
            skipped[kind] = skipped.get(kind, 0) + 1
            continue
        problem = parse_tunableop_row(fields[0], fields[1])
        if problem is None:
            raise ProblemError(f"{path}:{number}: cannot read TunableOp row {line[:120]!r}\n"
                            "hint: expected e.g. GemmTunableOp_BFloat16_NT,"
                            "nt_4096_8192_14336_ld_4096_14336_4096")
        origin = "tunableop-bias" if fields[0].startswith("GemmAndBias") else "tunableop"
        stats.append(ProblemStat(problem, 1, None, origin))
    if not stats:
        other = f" (only {', '.join(f'{n} {k}' for k, n in skipped.items())} rows)" \
            if skipped else ""
        raise ProblemError(f"{path}: no {'/'.join(o.rstrip('_') for o in GEMM_OPS)} rows"
                           f"{other}\nhint: record with PYTORCH_TUNABLEOP_ENABLED=1 "
                           "PYTORCH_TUNABLEOP_TUNING=0 PYTORCH_TUNABLEOP_RECORD_UNTUNED=1")
    return aggregate(stats)


def detect_kind(path: Path) -> str:
    """'trace', 'hipblaslt-log' or 'tunableop' from the file's first bytes."""
    head = _read(path, limit=65536)
    stripped = head.lstrip()
    if path.name.endswith(".gz") or stripped.startswith(("{", "[")):
        return "trace"
    if "hipblaslt-bench" in head:
        return "hipblaslt-log"
    if "TunableOp_" in head or stripped.startswith("Validator,"):
        return "tunableop"
    raise ProblemError(f"{path}: not a trace, hipBLASLt log or TunableOp CSV\nhint: pass "
                    "--trace, --hipblaslt-log or --tunableop to say which")


def _read(path: Path, limit: int | None = None) -> str:
    if path.name.endswith(".gz"):
        return ""
    try:
        with path.open(errors="replace") as handle:
            return handle.read(limit) if limit else handle.read()
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc.strerror}") from exc
