"""Timing of device work without host synchronisation inside the timed loop.

On a GPU a loop of launches is bracketed by two events on the current stream and the host
waits once, after the loop; per-iteration ``synchronize()`` or ``.item()`` calls would add
launch gaps and measure the host, not the kernels. torch.cuda.Event works on ROCm too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_loop(fn: Callable[[], object], device: torch.device, iters: int) -> float:
    """Seconds per call of ``fn`` over ``iters`` back-to-back calls (after warm-up)."""
    if iters < 1:
        raise ValueError("iters must be >= 1")
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    begin = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - begin) / iters


def calibrated_time(fn: Callable[[], object], device: torch.device, *, warmup: int,
                    target_s: float, min_iters: int, max_iters: int) -> tuple[float, int]:
    """Warm up, estimate one call, then time enough calls to fill about ``target_s``.

    Returns (seconds per call, iterations timed).
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    estimate = time_loop(fn, device, max(1, min_iters // 2 or 1))
    iters = int(target_s / estimate) if estimate > 0 else max_iters
    iters = max(min_iters, min(max_iters, iters))
    return time_loop(fn, device, iters), iters


def spread(samples: list[float]) -> dict[str, float]:
    """Median, min, max, p10 and p90 (nearest rank) of ``samples``, which must not be empty."""
    ordered = sorted(samples)
    count = len(ordered)

    def rank(fraction: float) -> float:
        return ordered[min(count - 1, max(0, round(fraction * (count - 1))))]

    middle = count // 2
    median = ordered[middle] if count % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1], "p10": rank(0.1),
            "p90": rank(0.9), "count": count}
