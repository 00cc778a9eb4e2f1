"""rccl_tests: the image's own RCCL benchmarks, all_reduce_perf, all_gather_perf and
reduce_scatter_perf, once over this node's GPUs.

ROCm images built by imagebuild carry ROCm/rccl-tests (recipe key ``rccl_tests``), built
against the image's RCCL without MPI into /opt/rccl-tests/bin. Their figures are the ones
sites and vendors quote, so this check reports them beside the ``collectives`` check's
torch.distributed figures: per collective the out-of-place bus bandwidth at the largest
size (nccl-tests doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for
all-gather and reduce-scatter), with the command, GPUs, sizes and the NCCL_ALGO/NCCL_PROTO
in force, and each run's raw output tail.

Who runs it: one process drives all the node's GPUs with ``-g N`` (no MPI in the image), so
local rank 0 of each node runs it and the node's other ranks wait at the runner's result
exchange. Starting it before the ranks would not fit: under torchrun or srun the launcher
has started the ranks before this code runs. Each benchmark gets a quarter of --timeout, so
the waiting ranks never give up first.

Sizes: 8 MiB up to the smallest power of two at or above the largest collective the train
step issues (the FSDP2 root group's fp32 reduce-scatter, 4,202,708,992 B for Llama-3.1-8B on
8 ranks, so 4 GiB; workload.fsdp_collectives), halved while three buffers of that size
(send, receive, and the expected values of -c 1) do not fit in this GPU's free memory.

Not in the default check list: it adds minutes of GPU time and measures what
``collectives`` measures with another tool; ``--checks ...,rccl_tests`` asks for it. There
is no generic floor for it in gpus.json; a references file judges
``rccl_tests.<op>_busbw_gbps``. Standard library and torch only.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..check_context import Context
from ..model.llama import LLAMA_3_1_8B
from ..model.workload import fsdp_collectives, megatron_collectives
from ..result import FAILED, NO_GPU, NOT_APPLICABLE, CheckResult, failed, judge, skipped
from ..tuning.rccl_sweep import BINARIES as SWEEP_BINARIES
from ..tuning.rccl_sweep import RCCL_TESTS_BIN, RcclTestsRow, parse_rccl_tests_rows

NAME = "rccl_tests"
#: Where the benchmarks are, when neither --rccl-tests-dir nor the default holds them.
BIN_DIR_ENV = "IMAGEBUILD_RCCL_TESTS_DIR"
#: The step's collectives, named as the collectives check names them -> their rccl-tests
#: binary (the sweep's table, which names them as collectives.csv does).
BINARIES = {op: SWEEP_BINARIES[op.replace("_", "")]
            for op in ("all_reduce", "all_gather", "reduce_scatter")}
MIN_BYTES = 8 * 2**20
ITERATIONS, WARMUP = 20, 5
#: The environment that changes what RCCL runs, reported with the figures when set.
CONFIG_ENV = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
              "NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE", "NCCL_NET_PLUGIN")
TAIL_LINES = 12

Runner = Callable[..., subprocess.CompletedProcess]


def bin_dir(options: Any, environ: Mapping[str, str] = os.environ) -> Path:
    return Path(getattr(options, "rccl_tests_dir", None) or environ.get(BIN_DIR_ENV)
                or RCCL_TESTS_BIN)


def size_range(world_size: int, free_bytes: int | None) -> tuple[int, int, str]:
    """(smallest, largest, why the largest): 8 MiB up to the power of two covering the
    train step's largest collective, halved while it does not fit three times in memory."""
    step = max(c.bytes for c in (*fsdp_collectives(LLAMA_3_1_8B, world_size),
                                 *megatron_collectives()))
    high = 1 << (step - 1).bit_length()
    why = f"covers the train step's largest collective ({step:,} B on {world_size} ranks)"
    if free_bytes is not None:
        fitting = high
        while fitting > MIN_BYTES and 3 * fitting > 0.9 * free_bytes:
            fitting //= 2
        if fitting < high:
            why = (f"{why} would need {3 * high / 2**30:.1f} GiB per GPU; capped at "
                   f"{fitting:,} B for {free_bytes / 2**30:.1f} GiB free")
            high = fitting
    return MIN_BYTES, max(MIN_BYTES, high), why


def command(binary: Path, gpus: int, low: int, high: int) -> list[str]:
    return [str(binary), "-b", str(low), "-e", str(high), "-f", "2", "-g", str(gpus),
            "-n", str(ITERATIONS), "-w", str(WARMUP), "-c", "1"]


def largest(rows: Sequence[RcclTestsRow]) -> RcclTestsRow:
    """The row of the largest size (not the best bandwidth: the figure is the large-message
    bandwidth the step's big collectives see)."""
    return max(rows, key=lambda row: row.bytes)


def run_one(binary: Path, gpus: int, low: int, high: int, timeout_s: float,
            runner: Runner = subprocess.run) -> tuple[dict[str, Any], str | None]:
    """One benchmark's figures, and the problem when it failed."""
    argv = command(binary, gpus, low, high)
    entry: dict[str, Any] = {"command": " ".join(argv)}
    try:
        result = runner(argv, capture_output=True, text=True, check=False, timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (
            exc.stdout or "")
        entry["output_tail"] = out.strip().splitlines()[-TAIL_LINES:]
        return entry, f"{binary.name} ran past {timeout_s:.0f} s (a quarter of --timeout)"
    except OSError as exc:
        return entry, f"{binary} cannot run: {exc.strerror or exc}"
    text = (result.stdout or "") + (result.stderr or "")
    entry["exit_code"] = result.returncode
    entry["output_tail"] = text.strip().splitlines()[-TAIL_LINES:]
    rows = parse_rccl_tests_rows(result.stdout or "")
    if result.returncode != 0 or not rows:
        last = (entry["output_tail"] or ["no output"])[-1][:200]
        return entry, (f"{binary.name} exited {result.returncode}"
                       + ("" if rows else " with no result rows") + f": {last}")
    top = largest(rows)
    wrong = [row for row in rows if row.wrong]
    entry.update(largest_bytes=top.bytes, busbw_gbps=top.busbw_gbs, algbw_gbps=top.algbw_gbs,
                 time_us=top.time_us, dtype=top.dtype, sizes=[min(row.bytes for row in rows), top.bytes],
                 rows=len(rows), wrong=sum(row.wrong or 0 for row in rows))
    if wrong:
        return entry, (f"{binary.name}: {entry['wrong']} wrong values (#wrong) at "
                       + ", ".join(f"{row.bytes} B" for row in wrong[:4]))
    return entry, None


def measure(directory: Path, gpus: int, world_size: int, free_bytes: int | None,
            timeout_s: float, environ: Mapping[str, str] = os.environ,
            runner: Runner = subprocess.run) -> CheckResult:
    """Run the three benchmarks over ``gpus`` GPUs and judge what they print."""
    low, high, why = size_range(world_size, free_bytes)
    configuration: dict[str, Any] = {
        "gpus": gpus, "processes": 1, "min_bytes": low, "max_bytes": high, "factor": 2,
        "iterations": ITERATIONS, "warmup": WARMUP, "check_results": True, "sizes_why": why,
        "env": {key: environ[key] for key in CONFIG_ENV if key in environ}}
    figures: dict[str, Any] = {"bin_dir": str(directory), "configuration": configuration,
                               "results": {}}
    problems: list[str] = []
    for op, name in BINARIES.items():
        entry, problem = run_one(directory / name, gpus, low, high, timeout_s, runner)
        figures["results"][op] = entry
        if problem:
            problems.append(problem)
        if "busbw_gbps" in entry:
            figures[f"{op}_busbw_gbps"] = entry["busbw_gbps"]
    env = ", ".join(f"{k}={v}" for k, v in configuration["env"].items()
                    if k in ("NCCL_ALGO", "NCCL_PROTO")) or "RCCL's own algorithm and protocol"
    figures["config"] = (f"{gpus} GPUs in one process (-g {gpus}), {low:,}..{high:,} B by x2, "
                         f"-n {ITERATIONS} -w {WARMUP}, {env}")
    measured = ", ".join(f"{op} {figures[f'{op}_busbw_gbps']:.1f}" for op in BINARIES
                         if f"{op}_busbw_gbps" in figures)
    return judge(NAME, problems,
                 f"busbw GB/s at {high:,} B: {measured} ({figures['config']}; results "
                 f"checked; no generic floor: a reference rccl_tests.<op>_busbw_gbps judges "
                 f"it)", figures)


def run(ctx: Context) -> CheckResult:
    directory = bin_dir(ctx.options)
    missing = [name for name in BINARIES.values() if not (directory / name).is_file()]
    if missing:
        return skipped(NAME, NOT_APPLICABLE,
                       f"this image has no rccl-tests: {', '.join(missing)} not in {directory} "
                       "(enable the recipe's rccl_tests, or pass --rccl-tests-dir DIR / "
                       f"${BIN_DIR_ENV})", {"bin_dir": str(directory)})
    if ctx.mode != "gpu":
        return skipped(NAME, NO_GPU, "rccl-tests need GPUs (CPU mode)")
    if ctx.rank != min(ctx.local_ranks):
        return skipped(NAME, NOT_APPLICABLE,
                       f"local rank 0 of {ctx.host} runs rccl-tests for the node")
    gpus = torch.cuda.device_count()
    if gpus < 2:
        return skipped(NAME, NOT_APPLICABLE,
                       f"this process sees {gpus} GPU: rccl-tests need 2 or more in one "
                       "process (a launcher giving each task one GPU, such as srun "
                       "--gpus-per-task=1, hides the others)", {"gpus": gpus})
    free = (torch.cuda.mem_get_info(ctx.device)[0] if ctx.device.type == "cuda" else None)
    result = measure(directory, gpus, ctx.world_size, free, ctx.options.timeout / 4)
    return replace(result, figures={**result.figures, "host": ctx.host})


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    """Each node's leader ran it: rank 0's result on top, every node's under ``per_node``
    when there are several, failed when any node failed."""
    leaders = sorted({min(r for r, h in enumerate(ctx.hosts) if h == host)
                      for host in set(ctx.hosts)}) if ctx.hosts else [0]
    chosen = [(rank, results[rank]) for rank in leaders if rank < len(results)]
    first = chosen[0][1]
    duration = max(r.duration_s for r in results)
    if len(chosen) == 1:
        return first.with_duration(duration)
    figures = {**first.figures, "per_node": [
        {"rank": rank, "host": ctx.hosts[rank], "status": r.status, "reason": r.reason,
         **{k: v for k, v in r.figures.items() if k.endswith("_busbw_gbps")}}
        for rank, r in chosen]}
    bad = [(rank, r) for rank, r in chosen if r.status == FAILED]
    if bad:
        return failed(NAME, "; ".join(f"{ctx.hosts[rank]}: {r.reason}" for rank, r in bad[:4]),
                      figures).with_duration(duration)
    return replace(first, figures=figures, duration_s=duration)
