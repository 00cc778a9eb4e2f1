"""repeated_init: a communicator over all ranks built and torn down several times in a row.

Jobs that start, fail and restart, and frameworks that rebuild their groups, create
communicators again and again; where that breaks it breaks intermittently: ROCm
7.14/10.0's RCCL (2.30.4), which turns cuMem off below kernel 6.8 and shares buffers through
legacy IPC handles, crashed or hung in 20-30 % of two-node launches on MI300A nodes with a
6.4 kernel under enroot, none under Podman (eth-cscs/alps-extended-images,
hooks.d/10-rccl-p2p-workaround.sh, which sets NCCL_P2P_DISABLE=1 there). One try proves
little; CYCLES tries in a row show such a rate. Each cycle creates a process group over
all ranks (RCCL/NCCL build the communicator at its first collective), all-reduces a
verified tensor on it within half of --timeout (groups.bound), and destroys it. A crashed rank ends its process:
the others then time out at the next exchange, and the run names it (rendezvous.py).
"""

from __future__ import annotations

import time
from typing import Any

import torch.distributed as dist

from ..check_context import Context
from ..result import NOT_APPLICABLE, CheckResult, failed, merge_global, passed, skipped
from .groups import all_reduce_on, bound

NAME = "repeated_init"
CYCLES = 5


def run(ctx: Context) -> CheckResult:
    if ctx.world_size < 2:
        return skipped(NAME, NOT_APPLICABLE, "one rank: no communicator to build")
    timeout = bound(ctx)
    rows: list[dict[str, Any]] = []
    for cycle in range(1, CYCLES + 1):
        begin = time.perf_counter()
        try:
            group = dist.new_group(ranks=list(range(ctx.world_size)), backend=ctx.backend,
                                   timeout=timeout)
            seconds, wrong = all_reduce_on(group, ctx, timeout)
        except Exception as exc:  # noqa: BLE001 - a timeout or a communicator that failed
            return failed(NAME, f"cycle {cycle} of {CYCLES}: communicator init or its first "
                          f"all-reduce failed ({str(exc).splitlines()[0][:200]})",
                          {"cycles": rows, "cycles_requested": CYCLES})
        dist.destroy_process_group(group)
        rows.append({"cycle": cycle, "init_and_all_reduce_s": round(seconds, 4),
                     "cycle_s": round(time.perf_counter() - begin, 4)})
        if wrong:
            return failed(NAME, f"cycle {cycle} of {CYCLES}: all-reduce gave {wrong}",
                          {"cycles": rows, "cycles_requested": CYCLES})
    slowest = max(r["cycle_s"] for r in rows)
    return passed(NAME, f"{CYCLES} communicators ({ctx.backend}, {ctx.world_size} ranks) "
                  f"built, all-reduced and destroyed in a row (slowest cycle {slowest:.3f} s)",
                  {"cycles": rows, "cycles_requested": CYCLES, "backend": ctx.backend,
                   "world_size": ctx.world_size})


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    return merge_global(results, ctx.hosts)
