"""groups: several process groups created in a row, an all-reduce on each, every one bounded.

Training stacks build many process groups (Megatron-LM one per parallel dimension, FSDP2's
device mesh), and a stack that works with one can hang on the second: on LUMI a second
process group hung in 13 of 17 tries with a ROCm 7.0 image
(https://github.com/lumi-ai-factory/laifs-container-recipes/issues/44). This check creates
GROUPS groups over all ranks, one after another, and all-reduces a tensor on each (on
the GPU backend: RCCL/NCCL, whose communicator is built at the first collective), then
destroys them. Each all-reduce waits at most half of --timeout (``Work.wait(timeout)``; the
exchange after the check waits the whole --timeout, so it still meets a rank that waited
out the bound); a group that hangs fails the check, naming it, instead of hanging the run. Results are verified:
ranks contribute 1..n, every element must be n(n+1)/2.
"""

from __future__ import annotations

import datetime as _dt
import time
from typing import Any

import torch
import torch.distributed as dist

from ..check_context import Context
from ..result import NOT_APPLICABLE, CheckResult, failed, merge_global, passed, skipped
from ..test_hooks import skips_group
from ..timing import synchronize

NAME = "groups"
GROUPS = 4
ELEMENTS = 1 << 16


def all_reduce_on(group: Any, ctx: Context, timeout: _dt.timedelta) -> tuple[float, str | None]:
    """(seconds, problem) of one verified all-reduce on ``group``."""
    tensor = torch.full((ELEMENTS,), float(ctx.rank + 1), device=ctx.device)
    begin = time.perf_counter()
    work = dist.all_reduce(tensor, group=group, async_op=True)
    work.wait(timeout=timeout)
    synchronize(ctx.device)
    seconds = time.perf_counter() - begin
    expected = ctx.world_size * (ctx.world_size + 1) / 2
    if not bool(torch.all(tensor == expected)):
        return seconds, f"wrong values (expected {expected:g})"
    return seconds, None


def bound(ctx: Context) -> _dt.timedelta:
    """How long one group's creation or all-reduce may take: half of --timeout."""
    return _dt.timedelta(seconds=max(1.0, ctx.options.timeout / 2))


def run(ctx: Context) -> CheckResult:
    if ctx.world_size < 2:
        return skipped(NAME, NOT_APPLICABLE, "one rank: no process group to build")
    timeout = bound(ctx)
    rows: list[dict[str, Any]] = []
    made = []
    problem = None
    try:
        for index in range(1, GROUPS + 1):
            begin = time.perf_counter()
            group = dist.new_group(ranks=list(range(ctx.world_size)), backend=ctx.backend,
                                   timeout=timeout)
            made.append(group)
            created = time.perf_counter() - begin
            if skips_group(ctx.rank, index):
                problem = f"group {index} of {GROUPS}: left out by the test hook"
                break
            try:
                seconds, wrong = all_reduce_on(group, ctx, timeout)
            except Exception as exc:  # noqa: BLE001 - a timeout or a broken communicator
                problem = (f"group {index} of {GROUPS}: all-reduce did not complete within "
                           f"{timeout.total_seconds():g} s ({str(exc).splitlines()[0][:160]})")
                break
            rows.append({"group": index, "create_s": round(created, 4),
                         "first_all_reduce_s": round(seconds, 4)})
            if wrong:
                problem = f"group {index} of {GROUPS}: all-reduce gave {wrong}"
                break
    finally:
        for group in made if problem is None else []:
            dist.destroy_process_group(group)
    figures = {"groups_requested": GROUPS, "groups": rows, "backend": ctx.backend,
               "world_size": ctx.world_size, "timeout_s": timeout.total_seconds()}
    if problem:
        return failed(NAME, problem, figures)
    slowest = max(r["first_all_reduce_s"] for r in rows)
    return passed(NAME, f"{GROUPS} process groups ({ctx.backend}, {ctx.world_size} ranks) "
                  f"created in a row, an all-reduce verified on each (slowest first "
                  f"all-reduce {slowest:.3f} s)", figures)


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    return merge_global(results, ctx.hosts)
