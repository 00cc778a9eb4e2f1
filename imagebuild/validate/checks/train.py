"""train: a short Llama-3.1-8B training step, random weights, real architecture.

bf16 compute with fp32 master weights through FSDP2 (fully_shard with a mixed-precision
policy, as torchtitan trains Llama-3.1-8B), fused AdamW, gradient clipping, sequence 8192,
one sequence per rank. The number of layers defaults to what fits in the GPU's free memory
(sizing.estimate_layers) and is reported. The same batch is fed every step, so a healthy
stack shows the loss falling within a few steps. Warm-up steps, then timed steps with one
synchronisation at each end; losses stay on the device until the timing has ended.

CPU mode runs the same code with a small configuration of the same architecture
(llama.LLAMA_CPU_SMOKE) in float32 over gloo.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .context import Context
from .llama import LLAMA_3_1_8B, LLAMA_CPU_SMOKE, Llama, LlamaConfig, parameter_counts
from .result import INCOMPLETE, CheckResult, below_minimum, judge, merge_global, skipped
from .sizing import GIB, estimate_layers, flops_per_token, mfu
from .timing import synchronize

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


def build(ctx: Context, config: LlamaConfig, dtype: torch.dtype) -> tuple[nn.Module, Any, dict]:
    """The sharded model and its optimizer, materialised on the device."""
    info: dict[str, Any] = {}
    with torch.device("meta"):
        model = Llama(config)
    if ctx.options.activation_checkpointing == "full":
        for i, block in enumerate(model.layers):
            model.layers[i] = Checkpointed(block)
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


def choose_layers(ctx: Context, base: LlamaConfig, seq: int, batch: int) -> tuple[int, str, dict]:
    if ctx.options.train_layers:
        return ctx.options.train_layers, "--train-layers", {}
    if ctx.mode != "gpu":
        return base.n_layers, "CPU configuration", {}
    free = min(int(f) for f in ctx.all_gather_object(torch.cuda.mem_get_info(ctx.device)[0]))
    estimate = estimate_layers(base, seq, batch, ctx.world_size, free,
                               ctx.options.activation_checkpointing == "full")
    return estimate.layers, "fits in free memory (estimate)", estimate.to_dict()


def run(ctx: Context) -> CheckResult:
    gpu = ctx.mode == "gpu"
    opts = ctx.options
    seq = opts.train_seq or (8192 if gpu else 256)
    batch = opts.train_batch
    steps = opts.train_steps or (10 if gpu else 4)
    warmup = opts.train_warmup or (3 if gpu else 1)
    dtype = torch.bfloat16 if gpu else torch.float32
    base = replace(LLAMA_3_1_8B if gpu else LLAMA_CPU_SMOKE, max_seq_len=seq)
    layers, layers_source, estimate = choose_layers(ctx, base, seq, batch)
    if layers < 1:
        return skipped(NAME, INCOMPLETE, "not even one Llama-3.1-8B layer fits in free GPU "
                       f"memory at seq {seq} ({estimate}); try --train-seq or "
                       "--activation-checkpointing full", {"memory_estimate": estimate})
    config = base.with_layers(layers)
    model, optimizer, info = build(ctx, config, dtype)

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

    if gpu:
        torch.cuda.reset_peak_memory_stats(ctx.device)
    losses = [step() for _ in range(warmup)]
    synchronize(ctx.device)
    ctx.barrier()
    begin = time.perf_counter()
    for _ in range(steps):
        losses.append(step())  # no .item() here: that would sync the host every step
    synchronize(ctx.device)
    elapsed = ctx.max_over_ranks(time.perf_counter() - begin)

    local = [float(x) for x in torch.stack(losses).float().cpu().tolist()]
    all_losses = ctx.all_gather_object(local)
    mean_losses = [sum(values) / len(values) for values in zip(*all_losses)]
    figures = _figures(ctx, config, seq, batch, steps, warmup, elapsed, mean_losses,
                       layers_source, estimate, info, dtype)
    return evaluate(figures, all_losses, ctx.peak_tflops, ctx.thresholds, gpu)


def _figures(ctx: Context, config: LlamaConfig, seq: int, batch: int, steps: int, warmup: int,
             elapsed: float, losses: list[float], layers_source: str, estimate: dict,
             info: dict, dtype: torch.dtype) -> dict[str, Any]:
    tokens_per_step = batch * seq
    tokens_per_s = tokens_per_step * steps / elapsed
    flops_token = flops_per_token(config, seq)
    figures: dict[str, Any] = {
        "model": {"layers": config.n_layers, "dim": config.dim, "heads": config.n_heads,
                  "kv_heads": config.n_kv_heads, "ffn_dim": config.ffn_dim,
                  "vocab": config.vocab_size, "rope_theta": config.rope_theta,
                  "parameters": parameter_counts(config)["total"]},
        "layers": config.n_layers, "layers_source": layers_source, "memory_estimate": estimate,
        "seq": seq, "batch_per_rank": batch, "world_size": ctx.world_size, "dtype": str(dtype),
        "steps": steps, "warmup_steps": warmup, "step_time_s": round(elapsed / steps, 4),
        "tokens_per_s_per_gpu": round(tokens_per_s, 1),
        "tokens_per_s_total": round(tokens_per_s * ctx.world_size, 1),
        "flops_per_token": flops_token,
        "tflops_per_gpu": round(tokens_per_s * flops_token / 1e12, 3),
        "loss_first": losses[0], "loss_last": losses[-1], "losses": [round(x, 4) for x in losses],
        "compile": bool(ctx.options.compile),
        "activation_checkpointing": ctx.options.activation_checkpointing, **info,
    }
    if ctx.mode == "gpu":
        figures["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(ctx.device) / GIB, 2)
        figures["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved(ctx.device) / GIB, 2)
        figures["device_memory_gib"] = round(
            torch.cuda.get_device_properties(ctx.device).total_memory / GIB, 2)
    else:
        import resource

        figures["peak_rss_gib"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 3)
    return figures


def evaluate(figures: dict[str, Any], rank_losses: list[list[float]], peak: float | None,
             thresholds: dict[str, float], gpu: bool) -> CheckResult:
    problems: list[str] = []
    bad = [rank for rank, losses in enumerate(rank_losses)
           if not all(math.isfinite(x) for x in losses)]
    if bad:
        problems.append(f"loss is not finite on rank(s) {', '.join(map(str, bad[:8]))}")
    first, last = figures["loss_first"], figures["loss_last"]
    if not bad and not last < first:
        problems.append(f"loss did not fall over {len(figures['losses'])} steps on a repeated "
                        f"batch ({first:.4f} -> {last:.4f})")
    if not figures["tokens_per_s_per_gpu"] > 0:
        problems.append("no tokens processed")
    summary = (f"{figures['layers']} layers ({figures['layers_source']}), seq {figures['seq']}: "
               f"{figures['tokens_per_s_per_gpu']:.0f} tokens/s/GPU, "
               f"{figures['tflops_per_gpu']:.3g} TFLOP/s/GPU, loss {first:.3f} -> {last:.3f}")
    if peak is not None:
        figures["peak_tflops"] = peak
        figures["mfu"] = round(mfu(figures["tokens_per_s_per_gpu"], figures["flops_per_token"],
                                   peak), 4)
        summary += f", MFU {figures['mfu']:.1%}"
        low = below_minimum("MFU", figures["mfu"] * 100, thresholds["train_min_mfu"] * 100, "%",
                            f"{figures['tflops_per_gpu']:.1f} of {peak:g} TFLOP/s per GPU")
        if low:
            problems.append(low)
    elif gpu:
        if problems:
            return judge(NAME, problems, "", figures)
        return skipped(NAME, INCOMPLETE, f"{summary}; MFU not judged: GPU not in the peak "
                       "table (pass --peak-tflops)", figures)
    else:
        summary += " (CPU: no peak, MFU not judged)"
    return judge(NAME, problems, summary, figures)



def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    return merge_global(results, ctx.hosts)
