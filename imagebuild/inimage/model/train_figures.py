"""The train check's report figures: its configuration next to every throughput figure.

A tokens/s figure means nothing without the step that produced it: ``configuration``
records it next to the figures (train_config.py says when two are comparable).
"""

from __future__ import annotations

from typing import Any

import torch

from ..check_context import Context
from ..timing import spread
from .llama import LlamaConfig, parameter_counts
from .sizing import HFU_CONVENTION, MFU_CONVENTION, flops_per_token, recompute_flops_per_token
from .step_plan import GIB, TrainPlan, block_activation_bytes, checkpointed_blocks
from .train_config import describe


def configuration(ctx: Context, config: LlamaConfig, plan: TrainPlan, seq: int, batch: int,
                  dtype: torch.dtype) -> dict[str, Any]:
    gpu = ctx.mode == "gpu"
    if not gpu:
        model = "Llama-3.1 architecture, reduced width (CPU proxy)"
    elif plan.is_proxy:
        model = f"Llama-3.1-8B proxy ({plan.layers} of {plan.full_layers} blocks)"
    else:
        model = "Llama-3.1-8B"
    return {
        "model": model, "workload": plan.workload, "layers": plan.layers,
        "full_layers": plan.full_layers, "dim": config.dim, "heads": config.n_heads,
        "kv_heads": config.n_kv_heads, "ffn_dim": config.ffn_dim, "vocab": config.vocab_size,
        "seq": seq, "micro_batch": batch, "tokens_per_step_per_rank": seq * batch,
        "activation_checkpointing": plan.activation_checkpointing,
        "world_size": ctx.world_size, "nodes": ctx.nodes,
        "precision": ("bf16 compute, fp32 master weights, fp32 gradient reduction"
                      if dtype == torch.bfloat16 else "float32"),
        "compile": bool(ctx.options.compile), "parallelism": "FSDP2",
    }


def proxy_figures(config: LlamaConfig, plan: TrainPlan, seq: int, batch: int) -> dict[str, Any]:
    """What a proxy is and what one of its blocks costs (parameters, FLOPs, memory)."""
    block = parameter_counts(config)["per_layer"]
    attention = 12 * config.n_heads * config.head_dim * seq
    return {"reason": plan.reason, "layers": plan.layers, "full_layers": plan.full_layers,
            "per_block": {"parameters": block, "flops_per_token": 6 * block + attention,
                          "sharded_state_bytes_per_rank": None,
                          "activation_bytes_without_checkpointing":
                              block_activation_bytes(config, seq * batch)}}


def figures_of(ctx: Context, config: LlamaConfig, plan: TrainPlan, setup: dict[str, Any],
               seq: int, batch: int, steps: int, warmup: int,
               measured: dict[str, Any]) -> dict[str, Any]:
    elapsed = measured["elapsed"]
    step_spread = spread(measured["step_times"])
    losses = [sum(values) / len(values) for values in zip(*measured["all_losses"])]
    tokens_per_step = batch * seq
    tokens_per_s = tokens_per_step * steps / elapsed
    flops_token = flops_per_token(config, seq)
    hardware_token = flops_token + recompute_flops_per_token(
        config, seq, checkpointed_blocks(config.n_layers, plan.activation_checkpointing))
    figures: dict[str, Any] = {
        "configuration": setup, "workload": plan.workload, "memory_plan": plan.to_dict(),
        "model": {"layers": config.n_layers, "dim": config.dim, "heads": config.n_heads,
                  "kv_heads": config.n_kv_heads, "ffn_dim": config.ffn_dim,
                  "vocab": config.vocab_size, "rope_theta": config.rope_theta,
                  "parameters": parameter_counts(config)["total"]},
        "layers": config.n_layers, "seq": seq, "batch_per_rank": batch,
        "world_size": ctx.world_size, "dtype": str(setup["precision"]),
        "steps": steps, "warmup_steps": warmup, "step_time_s": round(elapsed / steps, 4),
        "step_time_spread_s": {k: (round(v, 4) if isinstance(v, float) else v)
                               for k, v in step_spread.items()},
        "tokens_per_s_per_gpu": round(tokens_per_s, 1),
        "tokens_per_s_per_gpu_median_step": round(tokens_per_step / step_spread["median"], 1),
        "tokens_per_s_total": round(tokens_per_s * ctx.world_size, 1),
        "flops_per_token": flops_token,
        "tflops_per_gpu": round(tokens_per_s * flops_token / 1e12, 3),
        "flops_convention": MFU_CONVENTION,
        "hardware_flops_per_token": hardware_token,
        "hardware_tflops_per_gpu": round(tokens_per_s * hardware_token / 1e12, 3),
        "hardware_flops_convention": HFU_CONVENTION,
        "loss_first": losses[0], "loss_last": losses[-1], "losses": [round(x, 4) for x in losses],
        "compile": bool(ctx.options.compile),
        "activation_checkpointing": plan.activation_checkpointing, **measured["info"],
    }
    if plan.is_proxy:
        proxy = proxy_figures(config, plan, seq, batch)
        proxy["per_block"]["sharded_state_bytes_per_rank"] = (
            16 * proxy["per_block"]["parameters"] // ctx.world_size)
        figures["proxy"] = proxy
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


def out_of_memory_reason(exc: BaseException, ctx: Context, setup: dict[str, Any],
                         plan: TrainPlan, phase: str, peak_gib: float | None) -> str:
    """'out of memory on rank 0 during ...: GPU memory (cuda:0) ran out (...); tried ...'."""
    what = (f"GPU memory ({ctx.device})" if ctx.device.type == "cuda"
            else "host memory")
    message = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:240]
    planned = next((e for e in plan.estimates
                    if e.get("layers") == plan.layers
                    and e.get("activation_checkpointing") == plan.activation_checkpointing),
                   None)
    plan_text = (f"; planned {planned['total_gib']} of {planned['budget_gib']} GiB"
                 if planned else "")
    peak = f"; {peak_gib:.1f} GiB allocated at peak" if peak_gib is not None else ""
    return (f"out of memory on rank {ctx.rank} during {phase}: {what} ran out ({message}); "
            f"tried {plan.workload} workload {describe(setup)}{plan_text}{peak}; the step was "
            "not retried smaller: pass --activation-checkpointing full, a shorter "
            "--train-seq, or run on more ranks")
