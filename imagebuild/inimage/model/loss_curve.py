"""Does the loss curve fall? Its least-squares slope over the steps, as AMD's Cluster
Validation Suite judges a training run (``loss_curve``: the slope of the sampled losses
must be below ``max_slope``, 0.0 in its shipped configs:
https://github.com/ROCm/cvs/blob/dddd91430fe4db155e7ef78764e20955fdf706e3/cvs/input/config_file/training/megatron/mi3xx_megatron_llama-3.1-8b_single.json),
beside the last loss below the first: a curve can end lower than it started and still
climb on the whole, or dip at the end of a rise."""

from __future__ import annotations

from collections.abc import Sequence

MAX_SLOPE = 0.0


def slope(values: Sequence[float]) -> float | None:
    """Least-squares slope of ``values`` against their step index; None for fewer than 2."""
    n = len(values)
    if n < 2:
        return None
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    num = sum((i - mean_x) * (y - mean_y) for i, y in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den


def falls(values: Sequence[float]) -> tuple[bool, float | None]:
    """(the curve falls: its slope is below MAX_SLOPE and its last value below its first,
    the slope)."""
    fit = slope(values)
    return bool(fit is not None and fit < MAX_SLOPE and values[-1] < values[0]), fit
