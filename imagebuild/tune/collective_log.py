"""Collectives and their whole-buffer sizes from NCCL/RCCL debug logs (``NCCL_DEBUG=INFO``
with ``NCCL_DEBUG_SUBSYS=TUNING`` and/or ``COLL``), in every form the releases print.

Tuning decisions (printed by each communicator's rank 0):
- ``ReduceScatter: 302006272 Bytes -> Algo 1 proto 2 time 3628.243652``: RCCL 6.x-7.x
  (numbers; ``time`` is the cost model's estimate, not a measurement);
- ``805306368 Bytes -> Algo 1 proto 2 time 3970.683594``: no collective name, RCCL 2.21.x
  (ROCm 6.3) and NCCL <= 2.21 (topoGetAlgoInfo). The name comes from the COLL line the same
  process printed just before, when COLL is on;
- ``AllGather: 1048576 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..3}``: NCCL >= 2.23
  and the RCCL built on it (scheduleCollTasksToPlan, NVIDIA/nccl src/enqueue.cc:
  ``task->count * ncclTypeSize(task->datatype)``), a **per-rank** size for AllGather and
  ReduceScatter; it is multiplied by the communicator's rank count here. RCCL's WarpSpeed
  prints ``RING*``.
The first two already print the whole buffer: NCCL/RCCL multiply the per-rank count by
nRanks for AllGather and ReduceScatter before choosing (ncclInfoSetDerived, "count is per
rank").

Calls (COLL): ``AllReduce: opCount 3 sendbuff 0x.. recvbuff 0x.. count 1048576 datatype 9
op 0 root 0 comm 0x.. [nranks=8] stream 0x..``. ``count`` is per rank for AllGather and
ReduceScatter (NCCL's ncclReduceScatter takes recvcount, ncclAllGather sendcount;
nccl-tests doc/PERFORMANCE.md), so the buffer is count x type size x nranks.

Lines may carry a launcher's prefix: ``srun --label`` (``3: ``), mpirun/mpiexec
(``[0] ``), Open MPI ``--tag-output`` (``[1,0]<stdout>:``), or be glued to other output; the
parser looks for the NCCL part anywhere in the line. Numbers (src/include/nccl_common.h):
algorithms 0 TREE, 1 RING, 2 COLLNET_DIRECT, 3 COLLNET_CHAIN, 4 NVLS, 5 NVLS_TREE, 6 PAT;
protocols 0 LL, 1 LL128, 2 SIMPLE.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning.csv_files import write_rows

ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
COLLECTIVES = {"allreduce": "allreduce", "allgather": "allgather",
               "reducescatter": "reducescatter", "broadcast": "broadcast", "reduce": "reduce"}
#: Collectives whose ``count`` (COLL) and per-rank tuning size are one rank's share.
PER_RANK = ("allgather", "reducescatter")
#: ncclDataType_t sizes in bytes: int8, uint8, int32, uint32, int64, uint64, half, float,
#: double, bfloat16, then fp8 e4m3 and e5m2 (nccl.h).
DATATYPE_BYTES = (1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1)

#: ``host:pid:tid [dev] NCCL INFO``: who printed the line (absent when a log was trimmed).
_ORIGIN = re.compile(r"(?P<host>[^\s:\]>]+):(?P<pid>\d+):\d+ \[\d+\] NCCL INFO ")
_DECISION = re.compile(
    r"NCCL INFO (?:(?P<coll>[A-Za-z]+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+)\*?"
    r" proto (?P<proto>\w+)(?: time (?P<time>[\d.eE+-]+))?"
    r"(?P<per_rank> channel\{Lo\.\.Hi\})?")
_CALL = re.compile(
    r"NCCL INFO (?P<coll>\w+): opCount (?P<op>[0-9a-fx]+) .*?count (?P<count>\d+) "
    r"datatype (?P<dtype>\d+) .*?\[nranks=(?P<nranks>\d+)\]")
#: ``comm 0x.. rank 0 nRanks 8 nNodes 1 ...`` and ``... nranks 8 cudaDev 0 ... Init
#: COMPLETE``: a communicator's size, for per-rank tuning lines without a COLL line.
_COMM = re.compile(r"NCCL INFO .*?\bn[Rr]anks (?P<nranks>\d+)\b")

CSV_COLUMNS = ("collective", "bytes", "calls", "algorithm", "protocol", "model_time_us",
               "nranks", "hosts")


@dataclass(frozen=True)
class CollectiveRecord:
    """One collective at one whole-buffer size (``bytes``), how often it was seen, and
    what RCCL chose for it when the log says. ``collective`` is empty for a name-less
    tuning line that no COLL line names."""

    collective: str
    bytes: int
    calls: int
    algorithm: str = ""
    protocol: str = ""
    model_time_us: float | None = None
    nranks: int | None = None
    hosts: int = 1


#: COLL lines remembered per process to name the tuning lines after them (a group of
#: calls prints its calls first, then one decision each).
_RECENT_CALLS = 256


@dataclass
class _Process:
    """What one process printed so far: its recent calls and its communicators' sizes."""

    calls: list[tuple[str, int, int]] = field(default_factory=list)  # coll, bytes, nranks
    comm_sizes: set[int] = field(default_factory=set)

    def add_call(self, coll: str, whole: int, nranks: int) -> None:
        self.calls.append((coll, whole, nranks))
        del self.calls[:-_RECENT_CALLS]

    def call_for(self, coll: str | None, size: int, per_rank: bool
                 ) -> tuple[str, int] | None:
        """(collective, nranks) of the latest call this tuning line decided: same
        collective when named, same size (whole buffer, or one rank's share)."""
        for name, whole, nranks in reversed(self.calls):
            if (coll is None or name == coll) and \
                    whole == (size * nranks if per_rank else size):
                return name, nranks
        return None


def name_of(value: str, names: tuple[str, ...], what: str, where: str) -> str:
    if value.isdigit():
        index = int(value)
        if index >= len(names):
            raise TuneError(f"{where}: {what} {index} is not one of 0..{len(names) - 1}")
        return names[index]
    lowered = value.lower()
    if lowered not in names:
        raise TuneError(f"{where}: unknown {what} {value!r}; expected one of {', '.join(names)}")
    return lowered


def _collective(value: str) -> str | None:
    return COLLECTIVES.get(value.lower())


def _rank_count(process: _Process, coll: str, size: int, nranks: int | None,
                where: str) -> int:
    """The rank count that turns a per-rank size of ``coll`` into the whole buffer: its
    call's, else the process's one communicator size, else ``nranks``."""
    if call := process.call_for(coll, size, per_rank=True):
        return call[1]
    if len(process.comm_sizes) == 1:
        return next(iter(process.comm_sizes))
    if nranks:
        return nranks
    known = ", ".join(str(n) for n in sorted(process.comm_sizes)) or "none in the log"
    raise TuneError(f"{where}: {coll} tuning line gives a per-rank size and the rank count "
                    f"of its communicator is not known (communicator sizes: {known})",
                    hint="log with NCCL_DEBUG_SUBSYS=COLL,TUNING (each call names "
                         "[nranks=N]), or pass --nranks N")


def parse_logs(paths: Iterable[Path], nranks: int | None = None) -> list[CollectiveRecord]:
    """Collectives by (collective, whole-buffer bytes, algorithm, protocol), with how
    often each was seen. ``nranks``: the communicator size for per-rank tuning lines
    whose own process does not say it."""
    decisions: dict[tuple[str, int, str, str], list] = {}
    calls: dict[tuple[str, int], list] = {}
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise TuneError(f"{path}: cannot read log: {exc.strerror}") from exc
        processes: dict[tuple[str, str], _Process] = {}
        for number, line in enumerate(text.splitlines(), start=1):
            if "NCCL INFO" not in line:
                continue
            where = f"{path}:{number}"
            origin = _ORIGIN.search(line)
            host = origin["host"] if origin else ""
            process = processes.setdefault((host, origin["pid"] if origin else ""),
                                           _Process())
            if match := _DECISION.search(line):
                named = _collective(match["coll"]) if match["coll"] else None
                if match["coll"] and named is None:
                    continue  # e.g. Send/Recv: not a tuned collective
                size = int(match["bytes"])
                ranks: int | None = None
                if named in PER_RANK and match["per_rank"]:
                    ranks = _rank_count(process, named, size, nranks, where)
                    size *= ranks
                elif call := process.call_for(named, size, per_rank=False):
                    named, ranks = call
                key = (named or "", size, name_of(match["algo"], ALGORITHMS, "algorithm", where),
                       name_of(match["proto"], PROTOCOLS, "protocol", where))
                entry = decisions.setdefault(key, [0, None, set(), None])
                entry[0] += 1
                if match["time"] is not None:
                    entry[1] = float(match["time"])
                entry[2].add(host)
                entry[3] = ranks or entry[3]
            elif (match := _CALL.search(line)) and (coll := _collective(match["coll"])):
                dtype = int(match["dtype"])
                size = DATATYPE_BYTES[dtype] if dtype < len(DATATYPE_BYTES) else 1
                ranks = int(match["nranks"])
                total = int(match["count"]) * size * (ranks if coll in PER_RANK else 1)
                process.add_call(coll, total, ranks)
                entry = calls.setdefault((coll, total), [0, ranks])
                entry[0] += 1
            elif match := _COMM.search(line):
                process.comm_sizes.add(int(match["nranks"]))
    records = [CollectiveRecord(c, b, n, a, p, t, r, max(len(hosts - {""}), 1))
               for (c, b, a, p), (n, t, hosts, r) in decisions.items()]
    decided = {(r.collective, r.bytes) for r in records}
    records += [CollectiveRecord(c, b, n, nranks=r) for (c, b), (n, r) in calls.items()
                if (c, b) not in decided]
    if not records:
        raise TuneError("no collective found in the log(s)",
                        hint="run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING (tuning "
                             "decisions) or COLL (calls)")
    return sorted(records, key=lambda r: (r.collective, r.bytes, r.algorithm, r.protocol))


def write_collectives_csv(records: list[CollectiveRecord], path: Path) -> None:
    """collectives.csv (CSV_COLUMNS), written to a temporary name, then renamed."""
    write_rows(path, CSV_COLUMNS, ([r.collective, r.bytes, r.calls, r.algorithm, r.protocol,
                                    "" if r.model_time_us is None else r.model_time_us,
                                    "" if r.nranks is None else r.nranks, r.hosts]
                                   for r in records))
