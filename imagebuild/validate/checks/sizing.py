"""Model FLOPs per token, and how many Llama layers fit in a GPU's free memory.

FLOPs per token (training: forward + backward) follow PaLM (Chowdhery et al. 2022,
"PaLM: Scaling Language Modeling with Pathways", Appendix B) as torchtitan computes them
(torchtitan/models/llama3/model/args.py, get_nparams_and_flops):
    6 * N  +  12 * L * H * Q * T
N the non-embedding parameters (the output projection counts, the embedding lookup does
not), L layers, H heads, Q head dim, T sequence length. 6N is 2 FLOPs per multiply-add
times 3 (forward, and backward's two products); 12*L*H*Q*T is the attention score and
value products (2 matmuls x 2 FLOPs x 3 passes x T keys per token). Causal masking halves
the attention work actually needed, but published MFU figures (torchtitan's 33-39% for
Llama-3.1-8B on H100) count it whole; so does this, to stay comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

from .llama import LlamaConfig, parameter_counts

GIB = 2**30


def flops_per_token(config: LlamaConfig, seq_len: int) -> int:
    n = parameter_counts(config)["non_embedding"]
    return 6 * n + 12 * config.n_layers * config.n_heads * config.head_dim * seq_len


def mfu(tokens_per_s: float, flops_token: float, peak_tflops: float) -> float:
    return tokens_per_s * flops_token / (peak_tflops * 1e12)


@dataclass(frozen=True)
class MemoryEstimate:
    per_layer_bytes: int
    fixed_bytes: int
    budget_bytes: int
    layers: int

    def to_dict(self) -> dict[str, float | int]:
        return {"per_layer_gib": round(self.per_layer_bytes / GIB, 2),
                "fixed_gib": round(self.fixed_bytes / GIB, 2),
                "budget_gib": round(self.budget_bytes / GIB, 2), "layers": self.layers}


def activation_bytes_per_layer(config: LlamaConfig, tokens: int, checkpointed: bool) -> int:
    """Bytes autograd keeps per block without recomputation, in units of bf16 elements.

    Saved tensors, counted from the block's ops: per RMSNorm its float32 input (rms_norm
    upcasts bf16; 2 units), its normalised output and the weighted output (8 x d for the
    two norms); q, expanded k and v and the attention output kept by the fused kernel
    (4 x d); the wo input (1 x d); in the SwiGLU the w1 and w3 outputs, silu(w1) and their
    product (4 x ffn). With full checkpointing only the block input stays.
    """
    if checkpointed:
        return 2 * tokens * config.dim
    return 2 * tokens * (13 * config.dim + 4 * config.ffn_dim)


def estimate_layers(config: LlamaConfig, seq_len: int, batch: int, world_size: int,
                    free_bytes: int, checkpointed: bool, max_layers: int = 32) -> MemoryEstimate:
    """The most layers (<= max_layers) whose training step fits in ``free_bytes``.

    FSDP2 keeps fp32 parameters, gradients and both AdamW moments sharded (16 bytes per
    parameter / world size), gathers bf16 copies of about two blocks at a time, and
    reduces gradients in fp32. The loss keeps float32 log-probabilities and their
    gradient over the vocabulary (2 x 4 bytes x tokens x vocab) plus the bf16 logits or
    their gradient.
    10% of the free memory and 2 GiB stay unplanned for the allocator and workspaces.
    """
    counts = parameter_counts(config)
    tokens = seq_len * batch
    per_layer_params = counts["per_layer"]
    root_params = counts["embedding"] + counts["output"] + config.dim
    states = 16 / world_size
    per_layer = int(per_layer_params * states
                    + activation_bytes_per_layer(config, tokens, checkpointed) * 1.1)
    fixed = int(root_params * states
                + root_params * (2 + 4)                      # gathered bf16 + fp32 grads
                + per_layer_params * (2 + 4) * 2             # two blocks in flight
                + tokens * config.vocab_size * (4 + 4 + 2)   # loss
                + tokens * config.dim * 2 * 4                # final norm and head input
                + (activation_bytes_per_layer(config, tokens, False) if checkpointed else 0)
                + 2 * GIB)
    budget = int(free_bytes * 0.9)
    layers = max(0, min(max_layers, (budget - fixed) // per_layer)) if budget > fixed else 0
    return MemoryEstimate(per_layer, fixed, budget, int(layers))
