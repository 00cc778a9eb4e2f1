"""Model FLOPs per token and MFU (what fits in memory is step_plan.py's job).

FLOPs per token (training: forward + backward) follow PaLM (Chowdhery et al. 2022,
"PaLM: Scaling Language Modeling with Pathways", Appendix B) as torchtitan computes them
(torchtitan/models/llama3/model/args.py, get_nparams_and_flops):
    6 * N  +  12 * L * H * Q * T
N the non-embedding parameters (the output projection counts, the embedding lookup does
not), L layers, H heads, Q head dim, T sequence length. 6N is 2 FLOPs per multiply-add
times 3 (forward, and backward's two products); 12*L*H*Q*T is the attention score and
value products (2 matmuls x 2 FLOPs x 3 passes x T keys per token). Causal masking halves
the attention work actually needed, but published MFU figures (torchtitan's 33-39% for
Llama-3.1-8B on H100) count it whole; so does this, to stay comparable. Recomputation is
not counted either: MFU is the model's FLOPs, whatever the step did to fit in memory.

HFU (hardware FLOPs utilisation, Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models", section 6) adds the FLOPs the step executes
again: each recomputed (activation-checkpointed) block runs its forward a second time,
2 * p + 4 * H * Q * T per token for a block of p parameters, so with every block
checkpointed a step executes about 8N instead of 6N.
"""

from __future__ import annotations

from .llama import LlamaConfig, parameter_counts

GIB = 2**30


def flops_per_token(config: LlamaConfig, seq_len: int) -> int:
    n = parameter_counts(config)["non_embedding"]
    return 6 * n + 12 * config.n_layers * config.n_heads * config.head_dim * seq_len


#: What the train check's MFU counts, said in every report beside the figure.
MFU_CONVENTION = ("model FLOPs per token 6N + 12*L*H*Q*T (PaLM appendix B, as torchtitan): "
                  "causal attention counted whole, recomputation not counted")
HFU_CONVENTION = ("hardware FLOPs: the model FLOPs plus each recomputed block's forward "
                  "(2p + 4*H*Q*T per token)")


def recompute_flops_per_token(config: LlamaConfig, seq_len: int, recomputed_layers: int) -> int:
    """FLOPs per token that activation checkpointing runs a second time."""
    block = parameter_counts(config)["per_layer"]
    return recomputed_layers * (2 * block + 4 * config.n_heads * config.head_dim * seq_len)


def mfu(tokens_per_s: float, flops_token: float, peak_tflops: float) -> float:
    return tokens_per_s * flops_token / (peak_tflops * 1e12)
