"""GEMM problems from a PyTorch profiler trace (Chrome trace JSON): the code is
``validate/checks/tune_trace.py``, which images carry; here its errors are TuneErrors."""

from __future__ import annotations

from imagebuild.validate.checks import tune_trace

from .problem import host_errors

load_events = host_errors(tune_trace.load_events)
problems_from_events = tune_trace.problems_from_events
problems_from_trace = host_errors(tune_trace.problems_from_trace)

__all__ = ["load_events", "problems_from_events", "problems_from_trace"]
