"""Which training step fits: the full model with which activation checkpointing, or a proxy.

Memory per rank of an FSDP2 step (fully_shard per block and at the root, bf16 parameters
for compute, fp32 master weights, fp32 gradient reduction, AdamW), in bytes:

    sharded state     16 * P / W      fp32 parameter, gradient and two AdamW moments
    blocks in flight  2 * p * 8       for the block being computed and the one prefetched:
                                      its gathered bf16 parameters (2), their unsharded
                                      bf16 gradients (2) and the fp32 reduce-scatter
                                      input they are cast into (4)
    root              r * 8           embedding, final norm and output: the same 8 bytes
                                      per parameter as a block in flight
    loss              T * V * (4+4+2) float32 log-probabilities, their gradient, bf16 logits
    head input        T * d * 8
    activations       per AC mode, below
    reserve           10% of free memory and 2 GiB for the allocator and workspaces

P all parameters, p one block's, r the root's, W ranks, T tokens per rank and step
(sequence x micro-batch), V vocabulary, d model width. Activations autograd keeps per
block without recomputation, in bytes (bf16 = 2): per RMSNorm its float32 input, normalised
and weighted outputs (8d for the two norms); q, expanded k and v and the attention output
kept by the fused kernel (4d); the wo input (d); in the SwiGLU the w1 and w3 outputs,
silu(w1) and their product (4 x ffn): 2T(13d + 4 ffn). A checkpointed block keeps only its
input (2Td) and, while it is recomputed in backward, one block's full set.

Activation checkpointing modes (torch.utils.checkpoint, non-reentrant):
    none       every block keeps its activations
    selective  every other block is checkpointed (torchtitan's layer-level selective AC,
               ``selective_ac_option = "2"``): about half the activation memory, a quarter
               of the recompute of full
    full       every block is checkpointed

The plan tries none, selective, full at the model's full depth and takes the first that
fits. When none fits (the sharded state alone can exceed one GPU: Llama-3.1-8B's 16 bytes
x 8.03e9 parameters = 128 GB), the step is a declared proxy: the same width with as many
blocks as fit under full checkpointing. Its throughput is not the full model's, and the
report says so.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .llama import LlamaConfig, parameter_counts

GIB = 2**30
AC_MODES = ("none", "selective", "full")
RESERVE_FRACTION = 0.10
RESERVE_BYTES = 2 * GIB
#: Bytes per parameter of a block in flight: bf16 parameters, bf16 gradients, fp32
#: reduce-scatter buffer (FSDP2 casts the gradients to reduce_dtype before reducing:
#: torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py, foreach_reduce).
IN_FLIGHT_BYTES_PER_PARAM = 2 + 2 + 4


def block_activation_bytes(config: LlamaConfig, tokens: int) -> int:
    """Bytes one block keeps for backward without recomputation."""
    return 2 * tokens * (13 * config.dim + 4 * config.ffn_dim)


def checkpointed_blocks(layers: int, ac: str) -> int:
    """How many of ``layers`` blocks are recomputed under ``ac`` (selective: the odd ones)."""
    if ac == "full":
        return layers
    if ac == "selective":
        return layers // 2
    if ac == "none":
        return 0
    raise ValueError(f"unknown activation checkpointing mode {ac!r}; choose from {AC_MODES}")


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank needs for a training step of ``layers`` blocks under ``ac``."""

    layers: int
    activation_checkpointing: str
    sharded_state: int
    blocks_in_flight: int
    root: int
    loss: int
    activations: int
    budget: int

    @property
    def total(self) -> int:
        return (self.sharded_state + self.blocks_in_flight + self.root + self.loss
                + self.activations + RESERVE_BYTES)

    @property
    def fits(self) -> bool:
        return self.total <= self.budget

    def to_dict(self) -> dict[str, Any]:
        gib = {key: round(value / GIB, 2) for key, value in asdict(self).items()
               if key not in ("layers", "activation_checkpointing")}
        return {"layers": self.layers, "activation_checkpointing": self.activation_checkpointing,
                **{f"{key}_gib": value for key, value in gib.items()},
                "reserve_gib": round(RESERVE_BYTES / GIB, 2),
                "total_gib": round(self.total / GIB, 2), "fits": self.fits}


def estimate(config: LlamaConfig, layers: int, tokens: int, world_size: int, free_bytes: int,
             ac: str) -> MemoryEstimate:
    counts = parameter_counts(config)
    block = counts["per_layer"]
    root = counts["embedding"] + counts["output"] + config.dim
    params = layers * block + root
    recomputed = checkpointed_blocks(layers, ac)
    full_block = block_activation_bytes(config, tokens)
    activations = ((layers - recomputed) * full_block + recomputed * 2 * tokens * config.dim
                   + (full_block if recomputed else 0))
    return MemoryEstimate(
        layers=layers, activation_checkpointing=ac,
        sharded_state=16 * params // world_size,
        blocks_in_flight=2 * block * IN_FLIGHT_BYTES_PER_PARAM,
        root=root * IN_FLIGHT_BYTES_PER_PARAM,
        loss=tokens * config.vocab_size * (4 + 4 + 2) + tokens * config.dim * 8,
        activations=activations,
        budget=int(free_bytes * (1 - RESERVE_FRACTION)))


@dataclass(frozen=True)
class TrainPlan:
    """What the train check runs: ``workload`` is "full" or "proxy"."""

    workload: str
    layers: int
    full_layers: int
    activation_checkpointing: str
    reason: str
    estimates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def is_proxy(self) -> bool:
        return self.workload == "proxy"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def most_layers(config: LlamaConfig, tokens: int, world_size: int, free_bytes: int,
                ac: str) -> int:
    """The most blocks (<= the config's) that fit under ``ac``; 0 when not even one does."""
    best = 0
    for layers in range(1, config.n_layers + 1):
        if not estimate(config, layers, tokens, world_size, free_bytes, ac).fits:
            break
        best = layers
    return best


def plan_training(config: LlamaConfig, seq: int, batch: int, world_size: int, free_bytes: int,
                  ac: str = "auto", layers: int | None = None) -> TrainPlan:
    """The training step to run on ``world_size`` ranks with ``free_bytes`` free each.

    ``ac`` "auto" picks the cheapest mode that fits; a named mode is kept. ``layers``
    (--train-layers) below the model's depth asks for a proxy of that depth.
    """
    tokens = seq * batch
    depth = config.n_layers
    modes = AC_MODES if ac == "auto" else (ac,)
    full_depth = [estimate(config, depth, tokens, world_size, free_bytes, m) for m in modes]
    table = [e.to_dict() for e in full_depth]
    if layers is not None and layers < depth:
        fitting = [m for m in modes
                   if estimate(config, layers, tokens, world_size, free_bytes, m).fits]
        chosen = fitting[0] if fitting else modes[-1]
        table += [estimate(config, layers, tokens, world_size, free_bytes, chosen).to_dict()]
        return TrainPlan("proxy", layers, depth, chosen,
                         f"--train-layers {layers} asks for {layers} of {depth} blocks", table)
    for candidate in full_depth:
        if candidate.fits:
            return TrainPlan("full", depth, depth, candidate.activation_checkpointing,
                             f"all {depth} blocks fit with activation checkpointing "
                             f"{candidate.activation_checkpointing} "
                             f"({candidate.total / GIB:.1f} of {candidate.budget / GIB:.1f} GiB "
                             "planned)", table)
    last = full_depth[-1]
    mode = last.activation_checkpointing
    fit_layers = most_layers(config, tokens, world_size, free_bytes, mode)
    why = (f"the full {depth}-block model needs {last.total / GIB:.1f} GiB per rank even with "
           f"activation checkpointing {mode} ({last.sharded_state / GIB:.1f} GiB of it sharded "
           f"parameters, gradients and AdamW state over {world_size} rank(s)); "
           f"{last.budget / GIB:.1f} GiB planned")
    if fit_layers:
        table.append(estimate(config, fit_layers, tokens, world_size, free_bytes, mode).to_dict())
    return TrainPlan("proxy", fit_layers, depth, mode, why, table)
