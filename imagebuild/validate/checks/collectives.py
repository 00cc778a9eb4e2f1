"""collectives: all-reduce, all-gather and reduce-scatter bus bandwidth across all ranks.

Sizes include the two FSDP collectives of Llama-3.1-8B (all-gather 151003136 B,
reduce-scatter 302006272 B; REFERENCE.md). Sizes follow nccl-tests: the full buffer
(all-reduce), the gathered output (all-gather), the scattered input (reduce-scatter).
Bandwidth follows nccl-tests doc/PERFORMANCE.md:
    algbw = size / time
    busbw = algbw * 2(n-1)/n   for all-reduce
    busbw = algbw * (n-1)/n    for all-gather and reduce-scatter
with the time of the slowest rank. Every op's result is verified once before timing.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from .context import Context
from .result import NOT_APPLICABLE, CheckResult, below_minimum, failed, judge, merge_global, skipped
from .timing import synchronize, time_loop

NAME = "collectives"

GPU_SIZES = (2**20, 2**24, 2**26, 151003136, 2**28, 302006272, 2**30)
CPU_SIZES = (2**16, 2**20, 2**22)
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
        expected = torch.arange(1, world + 1, device=device, dtype=dtype).repeat_interleave(
            out.numel() // world)
        ok = bool(torch.equal(out, expected))
    else:
        ok = bool(torch.all(out == total))
    return None if ok else f"{op} returned wrong values on rank {rank}"


def measure(ctx: Context, op: str, size: int, dtype: torch.dtype) -> dict[str, Any]:
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
            "iters": iters, "algbw_gbps": round(algbw, 3), "busbw_gbps": round(busbw, 3)}


def evaluate(rows: list[dict[str, Any]], world: int, nodes: int, mode: str,
             thresholds: dict[str, float], backend: str) -> CheckResult:
    largest = {op: max((r for r in rows if r["op"] == op), key=lambda r: r["bytes"])
               for op in OPS if any(r["op"] == op for r in rows)}
    figures: dict[str, Any] = {
        "world_size": world, "nodes": nodes, "backend": backend, "results": rows,
        "busbw_gbps_at_largest": {op: r["busbw_gbps"] for op, r in largest.items()},
        "largest_bytes": {op: r["bytes"] for op, r in largest.items()},
    }
    for size in (151003136, 302006272):
        for row in rows:
            if row["requested_bytes"] == size:
                figures.setdefault("fsdp_sizes", {})[f"{row['op']}_{size}"] = row["busbw_gbps"]
    summary = ", ".join(f"{op} {r['busbw_gbps']:.1f}" for op, r in largest.items())
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
    dtype = torch.bfloat16 if gpu else torch.float32
    sizes = ctx.options.collective_sizes or (GPU_SIZES if gpu else CPU_SIZES)
    requested = list(sizes)
    if gpu:
        # all-gather holds its input and output: run only sizes every rank has room for.
        free = torch.cuda.mem_get_info(ctx.device)[0]
        fitting = [size for size in sizes if size * 2.2 < free]
        sizes = sorted(set.intersection(*(set(f) for f in ctx.all_gather_object(fitting))))
    if not sizes:
        return failed(NAME, f"no collective size fits in free GPU memory (asked {requested})")
    wrong = [w for w in (verify(op, ctx.device, ctx.world_size, ctx.rank) for op in OPS) if w]
    if not ctx.agree(not wrong):
        return failed(NAME, "; ".join(wrong) or "another rank got wrong collective results")
    rows = [measure(ctx, op, size, dtype) for op in OPS for size in sizes]
    if gpu:
        torch.cuda.empty_cache()
    result = evaluate(rows, ctx.world_size, ctx.nodes, ctx.mode, ctx.thresholds, ctx.backend)
    left_out = [size for size in requested if size not in sizes]
    if left_out:
        result.figures["sizes_left_out_for_memory"] = left_out
    return result


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    return merge_global(results, ctx.hosts)
