"""The ranks meet, within a bound, and a rank that never came is named.

torch.distributed's own env:// rendezvous waits for every rank and then fails with
"Timed out after N seconds waiting for clients. 1/2 clients joined": it says how many
came, not which rank or host did not. Here the ranks meet on a TCPStore first: rank 0
serves it, every rank writes ``joined/<rank>`` with its host, and rank 0 waits at most
the timeout for all of them. When one is missing, rank 0 knows which ranks joined and
from where, so the report names the ranks that never arrived and, under SLURM, the hosts
they were placed on (SLURM's task layout: SLURM_STEP_TASKS_PER_NODE over the step's node
list, block distribution, srun's default). The process group is then built on the same
store (``init_process_group(store=...)``), so a rendezvous that worked is the one torch
uses.

The same store carries each rank's progress (``progress/<rank>``: the check it is in),
so when a collective times out rank 0 can say which ranks never reached it.

AMD Primus's preflight bounds its rendezvous the same way and exits 2 instead of hanging
(https://rocm.docs.amd.com/projects/primus/en/latest/02-user-guide/preflight.html,
``--dist-timeout-sec``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .job_rank import Launch, expand_nodelist

JOINED = "joined/"
ROSTER = "roster"
PROGRESS = "progress/"
#: How often rank 0 looks for the ranks that have not joined yet.
POLL_S = 0.2


@dataclass
class RendezvousFailed(Exception):
    """The ranks did not all meet. ``joined`` maps the ranks that came to their hosts."""

    why: str
    world_size: int
    joined: dict[int, str] = field(default_factory=dict)
    #: Where SLURM placed each rank (empty outside SLURM).
    placed: dict[int, str] = field(default_factory=dict)
    master: str = ""
    timeout_s: float = 0.0

    def __str__(self) -> str:
        return self.why

    @property
    def missing(self) -> list[int]:
        return [r for r in range(self.world_size) if r not in self.joined]

    @property
    def missing_hosts(self) -> list[str]:
        """Hosts SLURM placed ranks on from which no rank joined."""
        arrived = {short(h) for h in self.joined.values()}
        return sorted({h for r, h in self.placed.items()
                       if r not in self.joined and short(h) not in arrived})

    def to_figures(self) -> dict[str, Any]:
        return {"expected_world_size": self.world_size, "master": self.master,
                "timeout_s": self.timeout_s,
                "joined": [{"rank": r, "host": h} for r, h in sorted(self.joined.items())],
                "missing_ranks": [{"rank": r, "expected_host": self.placed.get(r)}
                                  for r in self.missing],
                "missing_hosts": self.missing_hosts}


def short(host: str) -> str:
    """``nid001.cluster`` -> ``nid001``: SLURM names nodes by their short host name."""
    return host.split(".", 1)[0]


def _tasks_per_node(text: str) -> list[int]:
    """SLURM's compressed count list: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in text.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not match:
            return []
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts


def slurm_placement(launch: Launch, environ: Mapping[str, str]) -> dict[int, str]:
    """Rank -> host as SLURM lays tasks out (block distribution); empty when that is not
    known (not SLURM, a cyclic or arbitrary distribution, counts that do not add up)."""
    if launch.launcher != "slurm":
        return {}
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") or ""
    counts = _tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE")
                             or environ.get("SLURM_TASKS_PER_NODE") or "")
    distribution = environ.get("SLURM_DISTRIBUTION", "block")
    if not nodelist or not counts or not distribution.startswith("block"):
        return {}
    try:
        hosts = expand_nodelist(nodelist)
    except Exception:  # noqa: BLE001 - a malformed list only loses the host names
        return {}
    if len(hosts) != len(counts) or sum(counts) != launch.world_size:
        return {}
    placed: dict[int, str] = {}
    for host, count in zip(hosts, counts):
        for _ in range(count):
            placed[len(placed)] = host
    return placed


def _who(placed: Mapping[int, str], ranks: list[int]) -> str:
    parts = []
    for rank in ranks[:8]:
        where = placed.get(rank)
        parts.append(f"rank {rank}" + (f" (placed on {where})" if where else ""))
    if len(ranks) > 8:
        parts.append(f"and {len(ranks) - 8} more")
    return ", ".join(parts)


def meet(launch: Launch, host: str, timeout_s: float,
         environ: Mapping[str, str] = os.environ) -> Any:
    """Every rank meets on a TCPStore within ``timeout_s``; returns the store, or raises
    RendezvousFailed naming the ranks (and hosts) that never joined."""
    master = f"{launch.master_addr}:{launch.master_port}"
    placed = slurm_placement(launch, environ)
    timeout = _dt.timedelta(seconds=timeout_s)

    def failure(why: str, joined: dict[int, str]) -> RendezvousFailed:
        return RendezvousFailed(why, launch.world_size, joined, placed, master, timeout_s)

    import torch.distributed as dist  # here: `tune` imports this module on hosts without torch

    try:
        store = dist.TCPStore(launch.master_addr, launch.master_port, launch.world_size,
                              launch.rank == 0, timeout=timeout, wait_for_workers=False)
    except Exception as exc:  # noqa: BLE001 - DistNetworkError, RuntimeError, OSError
        first = str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__
        why = (f"rank 0 could not serve the rendezvous on {master}: {first}" if launch.rank == 0
               else f"rank {launch.rank} could not reach rank 0 at {master} within "
                    f"{timeout_s:g} s ({first})")
        raise failure(why, {}) from None
    store.set(f"{JOINED}{launch.rank}", json.dumps({"host": host, "pid": os.getpid()}))
    if launch.rank == 0:
        joined, why = _gather_roster(store, launch, timeout_s, placed)
        if why:
            raise failure(why, joined)
        return store
    try:
        store.wait([ROSTER], timeout)
        roster = json.loads(store.get(ROSTER).decode())
    except Exception as exc:  # noqa: BLE001 - the store timed out or rank 0 went away
        raise failure(f"rank {launch.rank} joined rank 0 at {master} but heard nothing back "
                      f"within {timeout_s:g} s ({str(exc).splitlines()[0][:160]})",
                      {launch.rank: host}) from None
    joined = {int(r): h for r, h in roster["joined"].items()}
    if roster.get("missing"):
        raise failure(roster["why"], joined)
    return store


def _gather_roster(store: Any, launch: Launch, timeout_s: float,
                   placed: dict[int, str]) -> tuple[dict[int, str], str]:
    """Rank 0 waits for every rank's mark, then tells them all: (who joined, why the
    rendezvous failed; empty when it did not)."""
    deadline = time.monotonic() + timeout_s
    keys = [f"{JOINED}{r}" for r in range(launch.world_size)]
    while not store.check(keys) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    joined = {r: json.loads(store.get(k).decode())["host"]
              for r, k in enumerate(keys) if store.check([k])}
    missing = [r for r in range(launch.world_size) if r not in joined]
    why = ""
    if missing:
        came = ", ".join(f"rank {r} ({h})" for r, h in sorted(joined.items())[:8])
        hosts = RendezvousFailed("", launch.world_size, joined, placed).missing_hosts
        why = (f"{len(missing)} of {launch.world_size} rank(s) never joined within "
               f"{timeout_s:g} s: {_who(placed, missing)}"
               + (f"; no rank came from {', '.join(hosts)}" if hosts else "")
               + f"; joined: {came}")
    store.set(ROSTER, json.dumps({"joined": {str(r): h for r, h in joined.items()},
                                  "missing": missing, "why": why}))
    return joined, why


#: What the error of a collective or store call says when a peer never came or went away
#: (gloo: "Timed out waiting 3000ms for recv operation to complete", "Connection closed by
#: peer"; the store: "wait timeout after ..."; NCCL's watchdog: "Watchdog caught
#: collective operation timeout").
_LOST = re.compile(r"timed out|timeout|connection (?:closed|reset|refused)|broken pipe|"
                   r"connection was closed|peer", re.IGNORECASE)


def ranks_lost(exc: BaseException) -> bool:
    """True when ``exc`` means a peer rank did not take part (timed out, went away)."""
    dist = sys.modules.get("torch.distributed")  # an error of it means torch was loaded
    dist_error = getattr(dist, "DistError", None)
    if dist_error is not None and isinstance(exc, dist_error):
        return True
    return isinstance(exc, RuntimeError) and bool(_LOST.search(str(exc)))


def mark(store: Any, rank: int, where: str) -> None:
    """Record where this rank is (the check it entered or finished); best effort."""
    if store is None:
        return
    with contextlib.suppress(Exception):  # progress marks must never fail a run
        store.set(f"{PROGRESS}{rank}", where)


def whereabouts(store: Any, world_size: int) -> dict[int, str | None]:
    """Each rank's last mark (None: none readable), without blocking on a missing key."""
    found: dict[int, str | None] = {}
    for rank in range(world_size):
        key = f"{PROGRESS}{rank}"
        try:
            found[rank] = store.get(key).decode() if store.check([key]) else None
        except Exception:  # noqa: BLE001 - rank 0's store may be gone already
            found[rank] = None
    return found
