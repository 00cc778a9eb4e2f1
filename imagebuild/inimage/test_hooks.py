"""TEST HOOKS: ways for the test suite to make a run misbehave on purpose. Not for users.

``IMAGEBUILD_TEST_SLOW_RANK=RANK:SECONDS`` makes that rank sleep SECONDS after every timed
GEMM call (gemm check), so the straggler analysis can be tested on one machine with a rank
that is really slower than its peers. A check that applied a hook says so in its figures
(``test_hook``), so no report hides it.

``IMAGEBUILD_TEST_SKIP_GROUP=RANK:INDEX`` makes that rank leave out the all-reduce on
the groups check's INDEX-th process group, as a rank stuck outside it would: the others'
all-reduce must time out and the check fail naming the group.

``IMAGEBUILD_TEST_HANG_RANK=RANK:CHECK:SECONDS`` makes that rank sleep SECONDS before it
runs CHECK, as a rank stuck in a driver call would: the other ranks wait for it at the
exchange after the check, and the run must end within --timeout, naming it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

SLOW_RANK_ENV = "IMAGEBUILD_TEST_SLOW_RANK"
HANG_RANK_ENV = "IMAGEBUILD_TEST_HANG_RANK"
SKIP_GROUP_ENV = "IMAGEBUILD_TEST_SKIP_GROUP"


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


def hang_for_test(rank: int, check: str) -> None:
    """Sleep here when IMAGEBUILD_TEST_HANG_RANK names this rank and check."""
    chosen, _, rest = os.environ.get(HANG_RANK_ENV, "").partition(":")
    name, _, seconds = rest.partition(":")
    try:
        if chosen and int(chosen) == rank and name == check:
            print(f"{HANG_RANK_ENV}: rank {rank} sleeps {seconds} s before {check}",
                  file=sys.stderr, flush=True)
            time.sleep(float(seconds))
    except ValueError:
        return


def skips_group(rank: int, index: int) -> bool:
    """True when IMAGEBUILD_TEST_SKIP_GROUP names this rank and group."""
    chosen, _, group = os.environ.get(SKIP_GROUP_ENV, "").partition(":")
    return bool(chosen) and chosen == str(rank) and group == str(index)
