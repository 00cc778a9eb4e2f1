"""TEST HOOKS: ways for the test suite to make a run misbehave on purpose. Not for users.

``IMAGEBUILD_TEST_SLOW_RANK=RANK:SECONDS`` makes that rank sleep SECONDS after every timed
GEMM call (gemm check), so the straggler analysis can be tested on one machine with a rank
that is really slower than its peers. A check that applied a hook says so in its figures
(``test_hook``), so no report hides it.
"""

from __future__ import annotations

import os
from typing import Any

SLOW_RANK_ENV = "IMAGEBUILD_TEST_SLOW_RANK"


def slow_rank_delay(rank: int) -> float:
    """Seconds this rank sleeps per timed call (0 unless the hook names it)."""
    spec = os.environ.get(SLOW_RANK_ENV, "")
    if not spec:
        return 0.0
    chosen, _, seconds = spec.partition(":")
    try:
        return float(seconds) if int(chosen) == rank else 0.0
    except ValueError:
        return 0.0


def hook_figures(delay_s: float) -> dict[str, Any]:
    return {"test_hook": f"{SLOW_RANK_ENV}: this rank slept {delay_s} s per call"} \
        if delay_s else {}
