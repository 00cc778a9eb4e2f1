"""RCCL/NCCL collectives from debug logs, and the RCCL tuner-plugin configuration.

Log lines (``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=TUNING`` or ``COLL``):
- tuning decision, printed by rank 0 (NCCL src/enqueue.cc, topoGetAlgoInfo:
  ``"%ld Bytes -> Algo %d proto %d time %f"``; ``time`` is the cost model's estimate):
  ``nid002664:106865:108086 [0] NCCL INFO ReduceScatter: 302006272 Bytes -> Algo 1 proto 2
  time 3628.243652``; upstream NCCL may print names (``Algo RING proto SIMPLE``);
- a call (COLL): ``... NCCL INFO AllReduce: opCount 3 sendbuff 0x.. recvbuff 0x.. count
  1048576 datatype 9 op 0 root 0 comm 0x.. [nranks=8] stream 0x..``.
Numbers (src/include/nccl_common.h): algorithms 0 TREE, 1 RING, 2 COLLNET_DIRECT,
3 COLLNET_CHAIN, 4 NVLS, 5 NVLS_TREE, 6 PAT; protocols 0 LL, 1 LL128, 2 SIMPLE.

Tuner config rows (ext-tuner/example in NCCL and RCCL):
``collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,
numPipeOps,regBuff``, lowercase names, ``-1`` = keep default / match anything; the byte
range is inclusive and the first matching row wins.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import TuneError

ALGORITHMS = ("tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
COLLECTIVES = {"allreduce": "allreduce", "allgather": "allgather",
               "reducescatter": "reducescatter", "broadcast": "broadcast", "reduce": "reduce"}
#: ncclDataType_t sizes in bytes: int8, uint8, int32, uint32, int64, uint64, half, float,
#: double, bfloat16, then fp8 e4m3 and e5m2 (nccl.h).
DATATYPE_BYTES = (1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1)

_TUNING = re.compile(
    r"^(?P<host>[^:\s]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO "
    r"(?P<coll>\w+): (?P<bytes>\d+) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
    r"(?: time (?P<time>[\d.eE+-]+))?")
_CALL = re.compile(
    r"NCCL INFO (?P<coll>\w+): opCount (?P<op>[0-9a-fx]+) .*?count (?P<count>\d+) "
    r"datatype (?P<dtype>\d+) .*?\[nranks=(?P<nranks>\d+)\]")

CSV_COLUMNS = ("collective", "bytes", "calls", "algorithm", "protocol", "model_time_us",
               "nranks", "hosts")


@dataclass(frozen=True)
class CollectiveRecord:
    collective: str
    bytes: int
    calls: int
    algorithm: str = ""
    protocol: str = ""
    model_time_us: float | None = None
    nranks: int | None = None
    hosts: int = 1


def _name(value: str, names: tuple[str, ...], what: str, where: str) -> str:
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


def parse_logs(paths: Iterable[Path]) -> list[CollectiveRecord]:
    """Collectives by (collective, bytes, algorithm, protocol), with how often each ran."""
    decisions: dict[tuple[str, int, str, str], list] = {}
    calls: dict[tuple[str, int], list] = {}
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise TuneError(f"{path}: cannot read log: {exc.strerror}") from exc
        for number, line in enumerate(text.splitlines(), start=1):
            if "NCCL INFO" not in line:
                continue
            where = f"{path}:{number}"
            if (match := _TUNING.search(line)) and (coll := _collective(match["coll"])):
                key = (coll, int(match["bytes"]), _name(match["algo"], ALGORITHMS,
                       "algorithm", where), _name(match["proto"], PROTOCOLS, "protocol", where))
                entry = decisions.setdefault(key, [0, None, set()])
                entry[0] += 1
                if match["time"] is not None:
                    entry[1] = float(match["time"])
                entry[2].add(match["host"])
            elif (match := _CALL.search(line)) and (coll := _collective(match["coll"])):
                dtype = int(match["dtype"])
                size = DATATYPE_BYTES[dtype] if dtype < len(DATATYPE_BYTES) else 1
                count = int(match["count"])
                # AllGather's count is per rank; the buffer the tuner sees is count x nranks.
                nranks = int(match["nranks"])
                total = count * size * (nranks if coll == "allgather" else 1)
                entry = calls.setdefault((coll, total), [0, nranks])
                entry[0] += 1
    records = [CollectiveRecord(c, b, n, a, p, t, None, len(hosts))
               for (c, b, a, p), (n, t, hosts) in decisions.items()]
    decided = {(r.collective, r.bytes) for r in records}
    records += [CollectiveRecord(c, b, n, nranks=r) for (c, b), (n, r) in calls.items()
                if (c, b) not in decided]
    if not records:
        raise TuneError("no collective found in the log(s)",
                        hint="run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING (tuning "
                             "decisions) or COLL (calls)")
    return sorted(records, key=lambda r: (r.collective, r.bytes, r.algorithm, r.protocol))


def write_collectives_csv(records: list[CollectiveRecord], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for r in records:
            writer.writerow([r.collective, r.bytes, r.calls, r.algorithm, r.protocol,
                             "" if r.model_time_us is None else r.model_time_us,
                             "" if r.nranks is None else r.nranks, r.hosts])


@dataclass(frozen=True)
class SweepPoint:
    """One measured (collective, size, algorithm, protocol) on a topology: bus bandwidth."""

    collective: str
    bytes: int
    algorithm: str
    protocol: str
    busbw_gbs: float
    n_nodes: int = -1
    n_ranks: int = -1
    channels: int = -1


def parse_rccl_tests(text: str) -> list[tuple[int, float]]:
    """(size in bytes, out-of-place busbw GB/s) rows of rccl-tests/nccl-tests output:
    ``size count type redop root time algbw busbw #wrong time algbw busbw #wrong``."""
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 13 and cells[0].isdigit() and cells[1].isdigit():
            try:
                rows.append((int(cells[0]), float(cells[7])))
            except ValueError:
                continue
    return rows


def tuner_config(points: list[SweepPoint]) -> str:
    """Tuner-plugin rows choosing, per collective and topology, the fastest algorithm and
    protocol for each measured size. A row covers the sizes above the previous measured
    size up to its own; consecutive sizes with the same choice share one row. Sizes above
    the largest measured one keep RCCL's own choice."""
    best: dict[tuple[str, int, int, int], SweepPoint] = {}
    for point in points:
        _name(point.algorithm, ALGORITHMS, "algorithm", "sweep")
        _name(point.protocol, PROTOCOLS, "protocol", "sweep")
        key = (point.collective, point.n_nodes, point.n_ranks, point.bytes)
        if key not in best or point.busbw_gbs > best[key].busbw_gbs:
            best[key] = point
    lines = [("# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,"
              "nRanks,numPipeOps,regBuff")]
    groups: dict[tuple[str, int, int], list[SweepPoint]] = {}
    for (coll, nodes, ranks, _), point in sorted(best.items()):
        groups.setdefault((coll, nodes, ranks), []).append(point)
    for (coll, nodes, ranks), series in groups.items():
        low = 0
        for i, point in enumerate(series):
            last = i + 1 == len(series)
            choice = (point.algorithm, point.protocol, point.channels)
            if last or (series[i + 1].algorithm, series[i + 1].protocol,
                        series[i + 1].channels) != choice:
                lines.append(f"{coll},{low},{point.bytes},{point.algorithm},{point.protocol},"
                             f"{point.channels},{nodes},{ranks},-1,-1")
                low = point.bytes + 1
    return "\n".join(lines) + "\n"
