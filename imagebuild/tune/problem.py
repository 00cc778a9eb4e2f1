"""Tuning errors on the host: the in-image tuning code (imagebuild.inimage.tuning, standard
library only) raises its own ProblemError; here it becomes ``TuneError``, which the CLI
prints as one line with its location.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import ParamSpec, TypeVar

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning import problems
from imagebuild.inimage.tuning.problems import ProblemError, ProblemStat

__all__ = ["host_errors", "read_csv"]


P = ParamSpec("P")
R = TypeVar("R")


def host_errors(function: Callable[P, R]) -> Callable[P, R]:
    """``function`` with the in-image ProblemError raised as TuneError (same message)."""
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
    return problems.read_csv(path)
