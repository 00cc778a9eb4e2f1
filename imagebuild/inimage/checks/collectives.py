"""collectives: all-reduce, all-gather and reduce-scatter bus bandwidth across all ranks.

Three kinds of size, each row labelled by where it comes from (``source``):
- a sweep, 1 MiB to 1 GiB in bf16 (64 KiB to 4 MiB on CPU): the threshold applies to its
  largest size;
- what the train step issues: FSDP2's all-gather of bf16 parameters and reduce-scatter of
  fp32 gradients per block and for the root group (embedding, final norm, output), derived
  from the model configuration and padded for this world size as FSDP2 pads
  (workload.fsdp_collectives: 436,224,000 B and 872,448,000 B for a Llama-3.1-8B block of
  218,112,000 parameters, 2,101,354,496 B and 4,202,708,992 B for its root group on 8 ranks;
  the CPU proxy's groups on CPU);
- the Megatron-LM bucket sizes measured on the cluster (a 151,003,136 B bf16 all-gather and
  a 302,006,272 B fp32 reduce-scatter), under ``megatron_bucket_sizes`` in the figures.
Sizes follow nccl-tests: the full buffer (all-reduce), the gathered output (all-gather),
the scattered input (reduce-scatter).
Bandwidth follows nccl-tests doc/PERFORMANCE.md:
    algbw = size / time
    busbw = algbw * 2(n-1)/n   for all-reduce
    busbw = algbw * (n-1)/n    for all-gather and reduce-scatter
with the time of the slowest rank. Every op's result is verified once before timing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from ..check_context import Context
from ..model.llama import LLAMA_3_1_8B, LLAMA_CPU_SMOKE
from ..model.workload import MEGATRON_SIZES, CollectiveSize, fsdp_collectives, megatron_collectives
from ..result import (
    NOT_APPLICABLE,
    CheckResult,
    below_minimum,
    failed,
    judge,
    merge_global,
    skipped,
)
from ..timing import synchronize, time_loop

NAME = "collectives"

GPU_SIZES = (2**20, 2**24, 2**26, 2**28, 2**30)
CPU_SIZES = (2**16, 2**20, 2**22)
SWEEP = "size sweep"
#: The figures' key for the Megatron bucket sizes (reports before it was named so called
#: it ``fsdp_sizes``, though it never held FSDP's sizes; validate/compare.py reads both).
MEGATRON_KEY = "megatron_bucket_sizes"
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
OPS = ("all_reduce", "all_gather", "reduce_scatter")

_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def bus_bandwidth_factor(op: str, world_size: int) -> float:
    n = world_size
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter"):
        return (n - 1) / n
    raise ValueError(f"unknown collective {op!r}")


def bandwidths(op: str, size_bytes: int, seconds: float, world_size: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes, as nccl-tests prints)."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_bandwidth_factor(op, world_size)


def _buffers(op: str, size_bytes: int, world: int, rank: int, device: torch.device,
             dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None, int]:
    """(input, output, bytes actually moved): element counts rounded down so that every
    rank gets an equal chunk."""
    elem = torch.tensor([], dtype=dtype).element_size()
    chunk = max(1, size_bytes // elem // world)
    total = chunk * world
    if op == "all_reduce":
        return torch.full((total,), float(rank + 1), device=device, dtype=dtype), None, total * elem
    if op == "all_gather":
        src = torch.full((chunk,), float(rank + 1), device=device, dtype=dtype)
        return src, torch.empty(total, device=device, dtype=dtype), total * elem
    src = torch.full((total,), float(rank + 1), device=device, dtype=dtype)
    return src, torch.empty(chunk, device=device, dtype=dtype), total * elem


def _run(op: str, src: torch.Tensor, out: torch.Tensor | None) -> None:
    if op == "all_reduce":
        dist.all_reduce(src)
    elif op == "all_gather":
        _all_gather(out, src)
    else:
        _reduce_scatter(out, src)


def verify(op: str, device: torch.device, world: int, rank: int) -> str | None:
    """None when a small instance of ``op`` gives the exact expected values (float32: sums
    of small integers stay exact whatever order the ring adds them in; bf16 would not)."""
    dtype = torch.float32
    src, out, _ = _buffers(op, 4096 * world * 4, world, rank, device, dtype)
    _run(op, src, out)
    synchronize(device)
    total = world * (world + 1) / 2  # ranks contribute 1..n
    if op == "all_reduce":
        ok = bool(torch.all(src == total))
    elif op == "all_gather":
        assert out is not None  # _buffers gives all_gather an output tensor
        expected = torch.arange(1, world + 1, device=device, dtype=dtype).repeat_interleave(
            out.numel() // world)
        ok = bool(torch.equal(out, expected))
    else:
        assert out is not None  # _buffers gives reduce_scatter an output tensor
        ok = bool(torch.all(out == total))
    return None if ok else f"{op} returned wrong values on rank {rank}"


def measurements(gpu: bool, sweep: list[int], world_size: int) -> list[CollectiveSize]:
    """Every (op, size, dtype) to time: the sweep, then the train step's and Megatron's."""
    dtype = "bfloat16" if gpu else "float32"
    rows = [CollectiveSize(op, size, dtype, SWEEP) for op in OPS for size in sweep]
    if gpu:
        return rows + fsdp_collectives(LLAMA_3_1_8B, world_size) + megatron_collectives()
    return rows + fsdp_collectives(LLAMA_CPU_SMOKE, world_size, mixed_precision=False,
                                   model="the CPU proxy model")


def measure(ctx: Context, op: str, size: int, dtype: torch.dtype,
            source: str = SWEEP) -> dict[str, Any]:
    src, out, moved = _buffers(op, size, ctx.world_size, ctx.rank, ctx.device, dtype)
    gpu = ctx.device.type == "cuda"

    def step() -> None:
        _run(op, src, out)

    for _ in range(5 if gpu else 2):
        step()
    synchronize(ctx.device)
    # Every rank must issue the same number of calls: the iteration count comes from
    # the slowest rank's estimate, agreed over the control group.
    estimate = ctx.max_over_ranks(time_loop(step, ctx.device, 2))
    target_s, low, high = (0.1, 5, 50) if gpu else (0.05, 3, 10)
    iters = max(low, min(high, int(target_s / estimate))) if estimate > 0 else high
    ctx.barrier()
    seconds = time_loop(step, ctx.device, iters)
    slowest = ctx.max_over_ranks(seconds)
    algbw, busbw = bandwidths(op, moved, slowest, ctx.world_size)
    return {"op": op, "bytes": moved, "requested_bytes": size, "seconds": slowest,
            "iters": iters, "algbw_gbps": round(algbw, 3), "busbw_gbps": round(busbw, 3),
            "dtype": str(dtype).replace("torch.", ""), "source": source}


def evaluate(rows: list[dict[str, Any]], world: int, nodes: int, mode: str,
             thresholds: dict[str, float], backend: str) -> CheckResult:
    swept = [r for r in rows if r.get("source", SWEEP) == SWEEP] or rows
    largest = {op: max((r for r in swept if r["op"] == op), key=lambda r: r["bytes"])
               for op in OPS if any(r["op"] == op for r in swept)}
    figures: dict[str, Any] = {
        "world_size": world, "nodes": nodes, "backend": backend, "results": rows,
        "busbw_gbps_at_largest": {op: r["busbw_gbps"] for op, r in largest.items()},
        "largest_bytes": {op: r["bytes"] for op, r in largest.items()},
    }
    for row in rows:
        if row.get("source", SWEEP) != SWEEP:
            figures.setdefault("training_sizes", []).append(
                {k: row[k] for k in ("op", "bytes", "dtype", "source", "busbw_gbps")
                 if k in row})
        if row["requested_bytes"] in MEGATRON_SIZES and row.get("source", SWEEP) != SWEEP:
            figures.setdefault(MEGATRON_KEY, {})[f"{row['op']}_{row['requested_bytes']}"] = (
                row["busbw_gbps"])
    summary = ", ".join(f"{op} {r['busbw_gbps']:.1f}" for op, r in largest.items())
    fsdp = [r for r in rows if str(r.get("source", "")).startswith("FSDP2")]
    if fsdp:
        summary += "; train step's FSDP2 (per block, then root group) " + ", ".join(
            f"{r['op']} {r['bytes']:,} B {r['dtype']} {r['busbw_gbps']:.1f}" for r in fsdp)
    if mode != "gpu":
        return judge(NAME, [], f"{backend}, {world} ranks: results verified; busbw GB/s at "
                     f"the largest size: {summary} (no threshold on CPU)", figures)
    key = "collective_min_busbw_gbps_multi_node" if nodes > 1 else "collective_min_busbw_gbps"
    minimum = thresholds[key]
    figures["min_busbw_gbps"] = minimum
    problems = [p for p in (
        below_minimum(f"{op} busbw", r["busbw_gbps"], minimum, " GB/s",
                      f"{r['bytes']} B, {world} ranks on {nodes} node(s)")
        for op, r in largest.items()) if p]
    return judge(NAME, problems, f"busbw GB/s at the largest size ({world} ranks, {nodes} "
                 f"node(s)): {summary}; results verified", figures)


def run(ctx: Context) -> CheckResult:
    if ctx.world_size < 2:
        return skipped(NAME, NOT_APPLICABLE,
                       "one rank: no collective to measure (start one process per GPU: "
                       "torchrun --nproc-per-node, srun, or --nproc)")
    gpu = ctx.mode == "gpu"
    sweep = list(ctx.options.collective_sizes or (GPU_SIZES if gpu else CPU_SIZES))
    wanted = measurements(gpu, sweep, ctx.world_size)
    todo = wanted
    if gpu:
        # all-gather holds its input and output: run only sizes every rank has room for.
        free = torch.cuda.mem_get_info(ctx.device)[0]
        fitting = [i for i, c in enumerate(wanted) if c.bytes * 2.2 < free]
        common = set.intersection(*(set(f) for f in ctx.all_gather_object(fitting)))
        todo = [c for i, c in enumerate(wanted) if i in common]
    if not todo:
        return failed(NAME, f"no collective size fits in free GPU memory (asked {sweep})")
    wrong = [w for w in (verify(op, ctx.device, ctx.world_size, ctx.rank) for op in OPS) if w]
    if not ctx.agree(not wrong):
        return failed(NAME, "; ".join(wrong) or "another rank got wrong collective results")
    rows = [measure(ctx, c.op, c.bytes, DTYPES[c.dtype], c.source) for c in todo]
    if gpu:
        torch.cuda.empty_cache()
    result = evaluate(rows, ctx.world_size, ctx.nodes, ctx.mode, ctx.thresholds, ctx.backend)
    left_out = [f"{c.op} {c.bytes} B ({c.source})" for c in wanted if c not in todo]
    if left_out:
        result = replace(result, figures={**result.figures,
                                          "sizes_left_out_for_memory": left_out})
    return result


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    return merge_global(results, ctx.hosts)
