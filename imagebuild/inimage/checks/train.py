"""train: a Llama-3.1-8B training step, random weights, real architecture, full depth.

bf16 compute with fp32 master weights through FSDP2 (fully_shard per block and at the
root with a bf16-param / fp32-reduce MixedPrecisionPolicy, as torchtitan trains
Llama-3.1-8B), fused AdamW, gradient clipping, sequence 8192, micro-batch 1 per rank.
All 32 blocks are trained whenever the ranks can hold them; step_plan.py picks the activation
checkpointing (none, selective = every other block, full) that fits. When even full
checkpointing cannot fit (one GPU holds 128 GB of fp32 state for 8B parameters), the step
is a declared proxy with fewer blocks: the report says ``workload: proxy`` with its exact
configuration, and the full-model MFU threshold is not applied to it.

The same batch is fed every step, so a healthy stack shows the loss falling. Warm-up
steps, then timed steps: device events between steps (no host synchronisation inside the
loop) give each step's time, the slowest rank's per step; losses stay on the device until
the timing has ended. An out-of-memory is a failed result naming what ran out and what
was tried.

CPU mode runs the same code on a reduced-width configuration of the same architecture
(llama.LLAMA_CPU_SMOKE) in float32 over gloo: always a proxy.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace
from itertools import pairwise
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..check_context import Context
from ..model.llama import LLAMA_3_1_8B, LLAMA_CPU_SMOKE, Llama, LlamaConfig
from ..model.loss_curve import falls
from ..model.step_plan import GIB, TrainPlan, checkpointed_blocks, plan_training
from ..model.train_figures import configuration, figures_of, out_of_memory_reason
from ..result import INCOMPLETE, CheckResult, below_minimum, failed, judge, merge_global, skipped
from ..timing import synchronize

NAME = "train"


def _fsdp2():
    """fully_shard and MixedPrecisionPolicy: public from torch 2.6, _composable in 2.4-2.5."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
        except ImportError:
            return None
    return fully_shard, MixedPrecisionPolicy


class Checkpointed(nn.Module):
    """Recompute a block in backward instead of keeping its activations."""

    def __init__(self, block: nn.Module):
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, x, cos, sin, use_reentrant=False)


def apply_checkpointing(model: Llama, mode: str) -> list[int]:
    """Wrap the blocks ``mode`` recomputes (selective: every other one, counted from the
    second, as torchtitan's layer-level selective AC); returns their indices."""
    count = len(model.layers)
    chosen = (list(range(count)) if mode == "full"
              else list(range(1, count, 2)) if mode == "selective" else [])
    assert len(chosen) == checkpointed_blocks(count, mode)
    for index in chosen:
        model.layers[index] = Checkpointed(model.layers[index])
    return chosen


def build(ctx: Context, config: LlamaConfig, dtype: torch.dtype,
          ac: str) -> tuple[nn.Module, Any, dict]:
    """The sharded model and its optimizer, materialised on the device."""
    info: dict[str, Any] = {}
    with torch.device("meta"):
        model = Llama(config)
    info["checkpointed_blocks"] = len(apply_checkpointing(model, ac))
    if ctx.options.compile:
        for block in model.layers:
            block.compile()
    fsdp = _fsdp2()
    if fsdp is None:
        raise RuntimeError(f"torch {torch.__version__} has no FSDP2 (fully_shard); need >= 2.4")
    fully_shard, MixedPrecisionPolicy = fsdp
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if dtype == torch.bfloat16 else MixedPrecisionPolicy())
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    info["parallelism"] = f"FSDP2 over {ctx.world_size} rank(s)"
    model.to_empty(device=ctx.device)
    with warnings.catch_warnings():
        # Sharded random init on a CPU mesh draws each shard locally; any random values do.
        warnings.filterwarnings("ignore", message="DTensor random operators")
        model.init_weights(seed=0)
    lr = 3e-4 if ctx.mode == "gpu" else 1e-3
    try:
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                                      weight_decay=0.1, fused=True)
        info["optimizer"] = "AdamW fused"
    except (RuntimeError, ValueError) as exc:
        if ctx.mode == "gpu":
            raise  # fused AdamW is part of what a GPU image must provide
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                                      weight_decay=0.1, foreach=True)
        info["optimizer"] = f"AdamW foreach (fused unavailable on CPU: {exc})"
    info["lr"] = lr
    return model, optimizer, info


def choose_plan(ctx: Context, base: LlamaConfig, seq: int, batch: int) -> TrainPlan:
    opts = ctx.options
    layers = opts.train_layers
    ac = opts.activation_checkpointing
    if ctx.mode != "gpu":
        depth = layers or base.n_layers
        return TrainPlan("proxy", depth, LLAMA_3_1_8B.n_layers, "none" if ac == "auto" else ac,
                         f"CPU mode: a reduced-width model of the same architecture ({depth} "
                         f"blocks, width {base.dim}, vocabulary {base.vocab_size}) in float32")
    free = min(int(f) for f in ctx.all_gather_object(torch.cuda.mem_get_info(ctx.device)[0]))
    return plan_training(base, seq, batch, ctx.world_size, free, ac, layers)


def is_out_of_memory(exc: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    if isinstance(exc, oom):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and ("out of memory" in text
                                              or "can't allocate memory" in text)


def run(ctx: Context) -> CheckResult:
    gpu = ctx.mode == "gpu"
    opts = ctx.options
    seq = opts.train_seq or (8192 if gpu else 256)
    batch = opts.train_batch
    steps = opts.train_steps or (20 if gpu else 4)
    warmup = opts.train_warmup or (5 if gpu else 1)
    dtype = torch.bfloat16 if gpu else torch.float32
    base = replace(LLAMA_3_1_8B if gpu else LLAMA_CPU_SMOKE, max_seq_len=seq)
    if opts.train_layers and opts.train_layers > base.n_layers:
        return failed(NAME, f"--train-layers {opts.train_layers}: the model has "
                      f"{base.n_layers} blocks")
    plan = choose_plan(ctx, base, seq, batch)
    config = base.with_layers(max(plan.layers, 1))
    setup = configuration(ctx, config, plan, seq, batch, dtype)
    if plan.layers < 1:
        return failed(NAME, f"not even one Llama-3.1-8B block fits at seq {seq}: "
                      f"{plan.reason}; try --train-seq", {"configuration": setup,
                                                         "memory_plan": plan.to_dict()})
    phase = ["building the sharded model"]
    try:
        measured = _train(ctx, config, plan, dtype, seq, batch, steps, warmup, phase)
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        peak = torch.cuda.max_memory_allocated(ctx.device) / GIB if gpu else None
        return failed(NAME, out_of_memory_reason(exc, ctx, setup, plan, phase[0], peak),
                      {"configuration": setup, "workload": plan.workload,
                       "memory_plan": plan.to_dict(), "out_of_memory": True})
    figures = figures_of(ctx, config, plan, setup, seq, batch, steps, warmup, measured)
    return evaluate(figures, measured["all_losses"], ctx.peak_tflops, ctx.thresholds, gpu)


def _train(ctx: Context, config: LlamaConfig, plan: TrainPlan, dtype: torch.dtype, seq: int,
           batch: int, steps: int, warmup: int, phase: list[str]) -> dict[str, Any]:
    """Build, warm up and time; the model lives in this frame only, so an exception (an
    out-of-memory) releases it on the way out."""
    model, optimizer, info = build(ctx, config, dtype, plan.activation_checkpointing)
    generator = torch.Generator(device=ctx.device).manual_seed(1000 + ctx.rank)
    tokens = torch.randint(0, config.vocab_size, (batch, seq + 1), device=ctx.device,
                           generator=generator)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    params = list(model.parameters())

    def step() -> torch.Tensor:
        # No name for the bf16 logits: after the float32 cast nothing needs them, and at
        # 8192 x 128256 they are 2 GiB.
        loss = F.cross_entropy(model(inputs).flatten(0, 1).float(), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    gpu = ctx.device.type == "cuda"
    if gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    phase[0] = "the first training step (warm-up)"
    losses = [step() for _ in range(warmup)]
    synchronize(ctx.device)
    ctx.barrier()
    phase[0] = "a timed training step"
    marks: list[Any] = []

    def mark() -> None:
        if gpu:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            marks.append(event)
        else:
            marks.append(time.perf_counter())

    begin = time.perf_counter()
    mark()
    for _ in range(steps):
        losses.append(step())  # no .item() here: that would sync the host every step
        mark()
    synchronize(ctx.device)
    elapsed = ctx.max_over_ranks(time.perf_counter() - begin)
    local_steps = ([a.elapsed_time(b) / 1e3 for a, b in pairwise(marks)] if gpu
                   else [b - a for a, b in pairwise(marks)])
    per_rank_steps = ctx.all_gather_object(local_steps, tag="train-steps")
    local = [float(x) for x in torch.stack(losses).float().cpu().tolist()]
    return {"elapsed": elapsed, "step_times": [max(t) for t in zip(*per_rank_steps)],
            "all_losses": ctx.all_gather_object(local), "info": info}


def evaluate(figures: dict[str, Any], rank_losses: list[list[float]], peak: float | None,
             thresholds: dict[str, float], gpu: bool) -> CheckResult:
    problems: list[str] = []
    bad = [rank for rank, losses in enumerate(rank_losses)
           if not all(math.isfinite(x) for x in losses)]
    if bad:
        problems.append(f"loss is not finite on rank(s) {', '.join(map(str, bad[:8]))}")
    first, last = figures["loss_first"], figures["loss_last"]
    fell, fit = falls(figures["losses"])
    figures["loss_slope_per_step"] = round(fit, 6) if fit is not None else None
    if not bad and not fell:
        problems.append(f"loss did not fall over {len(figures['losses'])} steps on a repeated "
                        f"batch ({first:.4f} -> {last:.4f}, least-squares slope "
                        f"{fit if fit is not None else float('nan'):+.4g} per step)")
    if not figures["tokens_per_s_per_gpu"] > 0:
        problems.append("no tokens processed")
    proxy = figures.get("workload") == "proxy"
    setup = figures.get("configuration") or {}
    spread = figures.get("step_time_spread_s")
    shape = (f"{setup.get('layers', figures['layers'])} blocks, seq {figures['seq']}, "
             f"micro-batch {setup.get('micro_batch', 1)}, AC "
             f"{setup.get('activation_checkpointing', '?')}, {setup.get('world_size', '?')} "
             f"rank(s)")
    head = (f"PROXY, not the full model ({(figures.get('proxy') or {}).get('reason', '')}); "
            f"{shape}" if proxy else f"full model: {shape}")
    summary = (f"{head}: {figures['tokens_per_s_per_gpu']:.0f} tokens/s/GPU, "
               f"{figures['tflops_per_gpu']:.3g} TFLOP/s/GPU, loss {first:.3f} -> {last:.3f}")
    if spread:
        summary += (f", step time median {spread['median']:.3g}s "
                    f"(p10 {spread['p10']:.3g}, p90 {spread['p90']:.3g}, {spread['count']} steps)")
    if peak is not None:
        figures["peak_tflops"] = peak
        figures["mfu"] = round(figures["tflops_per_gpu"] / peak, 4)
        summary += f", MFU {figures['mfu']:.1%} (model FLOPs, recompute not counted)"
        hardware = figures.get("hardware_tflops_per_gpu")
        if hardware is not None:
            figures["hfu"] = round(hardware / peak, 4)
            summary += f", HFU {figures['hfu']:.1%} (with recompute)"
        if proxy:
            summary += " (proxy: the full-model MFU threshold is not applied)"
        else:
            low = below_minimum("MFU", figures["mfu"] * 100, thresholds["train_min_mfu"] * 100,
                                "%", f"{figures['tflops_per_gpu']:.1f} of {peak:g} TFLOP/s "
                                "per GPU")
            if low:
                problems.append(low)
    elif gpu and not proxy:
        if problems:
            return judge(NAME, problems, "", figures)
        return skipped(NAME, INCOMPLETE, f"{summary}; MFU not judged: GPU not in the peak "
                       "table (pass --peak-tflops)", figures)
    else:
        summary += " (no peak: MFU not computed)"
    return judge(NAME, problems, summary, figures)


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    return merge_global(results, ctx.hosts)

