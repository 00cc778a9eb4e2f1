"""A GEMM problem in hipBLASLt terms, aggregated occurrences, and the problems CSV.

The code lives with the in-image checks (``validate/checks/tune_problems.py``, standard
library only) so that an image runs ``imagebuild tune shapes`` itself; here its input
errors become ``TuneError``, which the CLI prints as one line with its location.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import ParamSpec, TypeVar

from imagebuild.errors import TuneError
from imagebuild.validate.checks import tune_problems
from imagebuild.validate.checks.tune_problems import (
    HIPBLASLT_TYPES,
    GemmProblem,
    ProblemError,
    ProblemStat,
    aggregate,
    compute_type_for,
    time_shares,
    write_csv,
)

__all__ = ["HIPBLASLT_TYPES", "GemmProblem", "ProblemStat", "TuneError", "aggregate",
           "compute_type_for", "host_errors", "read_csv", "time_shares", "write_csv"]


P = ParamSpec("P")
R = TypeVar("R")


def host_errors(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` with the checks' ProblemError raised as TuneError (same message)."""
    @wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except ProblemError as exc:
            raise TuneError(str(exc)) from None
    return wrapper


@host_errors
def read_csv(path: Path) -> list[ProblemStat]:
    """A problems CSV; errors name the file, line and column."""
    return tune_problems.read_csv(path)
