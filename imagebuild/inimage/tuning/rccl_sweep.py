"""The RCCL sweep: every algorithm and protocol, forced in turn, over the step's sizes.

``imagebuild tune rccl-sweep`` (in the image, on a GPU node) runs the image's rccl-tests
(/opt/rccl-tests/bin, built for the recipe's GPU targets against the image's RCCL) once per
(collective, algorithm, protocol): ``NCCL_ALGO`` and ``NCCL_PROTO`` force the choice (RCCL
reads both, as NCCL does), ``-b``/``-e``/``-f 2`` cover the collective's sizes from
collectives.csv (`imagebuild tune rccl` wrote it from logs or the tuner's record) by powers
of two, from the largest power of two at or below the smallest size to the smallest at or
above the largest, so every size of the step falls in a measured range. The out-of-place
bus bandwidth of each row goes to sweep.csv, the input of ``imagebuild tune rccl
--sweep-results`` (the tuner configuration).

Why rccl-tests and not a torch.distributed loop: RCCL's own benchmark, built in the image
against the image's RCCL, measures what RCCL does with no framework in between, reports bus
bandwidth by nccl-tests' definitions (doc/PERFORMANCE.md), and one process drives a node's
GPUs with ``-g``. The image builds it without MPI, so the sweep is one node's; a multi-node
configuration needs rccl-tests built with MPI=1 (not done here).

A forced combination RCCL cannot run (Tree for AllGather, say) makes the benchmark fail; it
is named and left out. The tuner plugin's config and record are switched off for the sweep
(``NCCL_TUNER_CONFIG_FILE``, ``IMAGEBUILD_TUNER_RECORD`` removed): it measures RCCL's
algorithms, not a previous configuration. Standard library only.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .csv_files import write_rows
from .problems import ProblemError

RCCL_TESTS_BIN = Path("/opt/rccl-tests/bin")
#: collectives.csv names -> rccl-tests binaries (src/*.cu of rccl-tests).
BINARIES = {"allreduce": "all_reduce_perf", "allgather": "all_gather_perf",
            "reducescatter": "reduce_scatter_perf", "broadcast": "broadcast_perf",
            "reduce": "reduce_perf"}
ALGORITHMS = ("ring", "tree")
PROTOCOLS = ("ll", "ll128", "simple")
SWEEP_COLUMNS = ("collective", "bytes", "algorithm", "protocol", "busbw_gbs", "nNodes",
                 "nRanks", "channels")

Runner = Callable[..., subprocess.CompletedProcess]


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


@dataclass(frozen=True)
class RcclTestsRow:
    """One size of rccl-tests/nccl-tests output, out-of-place columns (the first of the two
    time/algbw/busbw/#wrong groups). ``wrong`` is None where the run did not check results
    (``-c 0`` prints N/A)."""

    bytes: int
    count: int
    dtype: str
    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None


def parse_rccl_tests_rows(text: str) -> list[RcclTestsRow]:
    """The size rows of rccl-tests/nccl-tests output, whose columns are
    ``size count type redop root time algbw busbw #wrong time algbw busbw #wrong``
    (nccl-tests src/common.cu); headers, ``# Avg bus bandwidth`` and log lines are skipped."""
    rows = []
    for line in text.splitlines():
        cells = line.split()
        if len(cells) >= 13 and cells[0].isdigit() and cells[1].isdigit():
            try:
                rows.append(RcclTestsRow(int(cells[0]), int(cells[1]), cells[2],
                                         float(cells[5]), float(cells[6]), float(cells[7]),
                                         int(cells[8]) if cells[8].isdigit() else None))
            except ValueError:
                continue
    return rows


def parse_rccl_tests(text: str) -> list[tuple[int, float]]:
    """(size in bytes, out-of-place busbw GB/s) rows of rccl-tests/nccl-tests output."""
    return [(row.bytes, row.busbw_gbs) for row in parse_rccl_tests_rows(text)]


def size_ranges(collectives_csv: Path) -> dict[str, tuple[int, int]]:
    """Per collective, the power-of-two range that covers its sizes in collectives.csv."""
    sizes: dict[str, list[int]] = {}
    try:
        with collectives_csv.open(newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), start=2):
                name = (row.get("collective") or "").lower()
                if not name:
                    continue  # a name-less tuning line: no benchmark to run for it
                if name not in BINARIES:
                    continue  # send/recv and others have no sweep here
                try:
                    sizes.setdefault(name, []).append(int(row["bytes"]))
                except (KeyError, TypeError, ValueError):
                    raise ProblemError(f"{collectives_csv}:{line}: bad bytes "
                                       f"{row.get('bytes')!r}") from None
    except OSError as exc:
        raise ProblemError(f"{collectives_csv}: cannot read: {exc.strerror} (write it with "
                           "`imagebuild tune rccl LOGS` or `--records DIR`)") from exc
    if not sizes:
        raise ProblemError(f"{collectives_csv}: no collective of "
                           f"{', '.join(BINARIES)} with a name to sweep")
    ranges = {}
    for name, values in sizes.items():
        low = 1 << max(0, (max(1, min(values))).bit_length() - 1)
        high = 1 << (max(values) - 1).bit_length() if max(values) > 1 else 1
        ranges[name] = (low, max(low, high))
    return ranges


def visible_gpus(environ: Mapping[str, str] = os.environ) -> int:
    """GPUs this process may use: the visible-devices list when one is set, else the
    render nodes under /dev/dri (one per AMD GPU or partition)."""
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = environ.get(name)
        if value is not None:
            return len([item for item in value.split(",") if item.strip()])
    return len(list(Path("/dev/dri").glob("renderD*"))) if Path("/dev/dri").is_dir() else 0


def sweep_env(environ: Mapping[str, str], algorithm: str, protocol: str) -> dict[str, str]:
    env = {key: value for key, value in environ.items()
           if key not in ("NCCL_TUNER_CONFIG_FILE", "IMAGEBUILD_TUNER_RECORD", "NCCL_ALGO",
                          "NCCL_PROTO")}
    env.update(NCCL_ALGO={"ring": "Ring", "tree": "Tree"}[algorithm],
               NCCL_PROTO={"ll": "LL", "ll128": "LL128", "simple": "Simple"}[protocol])
    return env


def run_sweep(ranges: Mapping[str, tuple[int, int]], gpus: int, bin_dir: Path = RCCL_TESTS_BIN,
              algorithms: Sequence[str] = ALGORITHMS, protocols: Sequence[str] = PROTOCOLS,
              iterations: int = 20, warmup: int = 5, runner: Runner = subprocess.run,
              environ: Mapping[str, str] = os.environ,
              report: Callable[[str], None] = print) -> list[SweepPoint]:
    rows: list[SweepPoint] = []
    for collective, (low, high) in sorted(ranges.items()):
        binary = bin_dir / BINARIES[collective]
        if not binary.is_file():
            raise ProblemError(f"{binary}: no such benchmark (the image's rccl-tests stage "
                               "installs it; pass --rccl-tests-dir elsewhere)")
        for algorithm in algorithms:
            for protocol in protocols:
                command = [str(binary), "-b", str(low), "-e", str(high), "-f", "2",
                           "-g", str(gpus), "-n", str(iterations), "-w", str(warmup)]
                result = runner(command, env=sweep_env(environ, algorithm, protocol),
                                capture_output=True, text=True, check=False)
                measured = parse_rccl_tests(result.stdout)
                if result.returncode != 0 or not measured:
                    tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [""]
                    report(f"{collective} {algorithm}/{protocol}: not available "
                           f"(exit {result.returncode}: {tail[0][:160]})")
                    continue
                for size, busbw in measured:
                    # one node: rccl-tests is built without MPI (module docstring)
                    rows.append(SweepPoint(collective, size, algorithm, protocol, busbw,
                                           n_nodes=1, n_ranks=gpus))
                best = max(busbw for _, busbw in measured)
                report(f"{collective} {algorithm}/{protocol}: {len(measured)} sizes "
                       f"{low}..{high} B on {gpus} GPUs, best busbw {best:.2f} GB/s")
    return rows


def write_sweep_csv(rows: Sequence[SweepPoint], path: Path) -> None:
    """sweep.csv (SWEEP_COLUMNS), written whole, then renamed."""
    write_rows(path, SWEEP_COLUMNS, ([row.collective, row.bytes, row.algorithm, row.protocol,
                                      row.busbw_gbs, row.n_nodes, row.n_ranks, row.channels]
                                     for row in rows))


def read_sweep_csv(path: Path) -> list[SweepPoint]:
    """sweep.csv back (nNodes, nRanks and channels optional: -1); errors name the line."""
    points = []
    try:
        with path.open(newline="") as handle:
            for line, row in enumerate(csv.DictReader(handle), start=2):
                try:
                    points.append(SweepPoint(
                        row["collective"].lower(), int(row["bytes"]), row["algorithm"].lower(),
                        row["protocol"].lower(), float(row["busbw_gbs"]),
                        int(row.get("nNodes") or -1), int(row.get("nRanks") or -1),
                        int(row.get("channels") or -1)))
                except (KeyError, TypeError, ValueError) as exc:
                    raise ProblemError(f"{path}:{line}: bad sweep row ({exc})\nhint: columns "
                                       "collective,bytes,algorithm,protocol,busbw_gbs") from None
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read: {exc.strerror}") from exc
    return points


def add_rccl_sweep_arguments(parser: argparse.ArgumentParser, with_out: bool = True) -> None:
    """The sweep's flags; ``with_out`` adds ``--out`` (the host's `tune rccl` has its own)."""
    if with_out:
        parser.add_argument("--out", type=Path, default=Path("tuning/rccl"),
                            help="directory of collectives.csv, where sweep.csv goes "
                                 "(default tuning/rccl)")
    parser.add_argument("--collectives", type=Path, default=None,
                        help="collectives.csv from `imagebuild tune rccl` (default "
                             "OUT/collectives.csv)")
    parser.add_argument("--gpus", type=int, default=None,
                        help="GPUs of this node to use (default: all visible)")
    parser.add_argument("--rccl-tests-dir", type=Path, default=RCCL_TESTS_BIN,
                        help=f"rccl-tests binaries (default {RCCL_TESTS_BIN})")
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS),
                        help=f"algorithms to force (default {','.join(ALGORITHMS)})")
    parser.add_argument("--protocols", default=",".join(PROTOCOLS),
                        help=f"protocols to force (default {','.join(PROTOCOLS)})")
    parser.add_argument("--iterations", type=int, default=20,
                        help="timed iterations per size (rccl-tests -n; default 20)")


def _names(value: str, allowed: Sequence[str], flag: str) -> list[str]:
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in allowed]
    if unknown or not names:
        raise ProblemError(f"{flag}: {','.join(unknown) or 'empty'}: expected some of "
                           f"{','.join(allowed)}")
    return names


def run_rccl_sweep(args: argparse.Namespace) -> Path | None:
    """The sweep here: OUT/sweep.csv, or None on a node with no GPU (it says so)."""
    algorithms = _names(args.algorithms, ALGORITHMS, "--algorithms")
    protocols = _names(args.protocols, PROTOCOLS, "--protocols")
    ranges = size_ranges(args.collectives or args.out / "collectives.csv")
    gpus = args.gpus if args.gpus is not None else visible_gpus()
    if gpus < 1:
        print("rccl sweep: skipped: GPU-only (no GPU visible: /dev/dri has no render node "
              "and no *_VISIBLE_DEVICES names one)", flush=True)
        return None
    rows = run_sweep(ranges, gpus, args.rccl_tests_dir, algorithms, protocols,
                     iterations=args.iterations)
    if not rows:
        raise ProblemError("rccl sweep: no combination ran (every benchmark failed; see the "
                           "lines above)")
    sweep_csv = args.out / "sweep.csv"
    write_sweep_csv(rows, sweep_csv)
    print(f"{len(rows)} measurements -> {sweep_csv}", flush=True)
    return sweep_csv
