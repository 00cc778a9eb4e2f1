"""GEMM problems from what the libraries record themselves (a hipBLASLt LOG_MASK=32 log, a
TunableOp CSV): the code is ``validate/checks/tune_sources.py``, which images carry; here
its errors are TuneErrors."""

from __future__ import annotations

from imagebuild.validate.checks import tune_sources
from imagebuild.validate.checks.tune_sources import parse_bench_line, parse_tunableop_row

from .problem import host_errors

problems_from_hipblaslt_log = host_errors(tune_sources.problems_from_hipblaslt_log)
problems_from_tunableop_csv = host_errors(tune_sources.problems_from_tunableop_csv)
detect_kind = host_errors(tune_sources.detect_kind)

__all__ = ["detect_kind", "parse_bench_line", "parse_tunableop_row",
           "problems_from_hipblaslt_log", "problems_from_tunableop_csv"]
