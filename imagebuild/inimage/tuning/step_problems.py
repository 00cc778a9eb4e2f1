"""The GEMM problems of one Llama training step, derived from the model's dimensions.

Each linear layer y = x @ W.t() (W: [out, in], x: [tokens, in]) runs three GEMMs
(torch's mm_mat1_backward / mm_mat2_backward), in hipBLASLt terms:
    forward        y  = x @ W.t()          m=out  n=tokens k=in      TN
    input grad     dx = dy @ W             m=in   n=tokens k=out     NN
    weight grad    dW = (dy.t() @ x).t()   m=in   n=out    k=tokens  NT
Layers: attention q, k, v (or one fused qkv, as Megatron-LM's linear_qkv), o; feed-forward
gate and up (or one fused gate_up, Megatron's linear_fc1 with SwiGLU) and down; the output
projection. Attention's own batched products are not counted (flash kernels run them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..model.llama_config import LlamaConfig
from .problems import GemmProblem, ProblemStat, aggregate, compute_type_for


@dataclass(frozen=True)
class Linear:
    name: str
    in_features: int
    out_features: int
    per_layer: bool = True


def linears(config: LlamaConfig, fused_qkv: bool = False,
            fused_gate_up: bool = False) -> list[Linear]:
    q = config.n_heads * config.head_dim
    kv = config.n_kv_heads * config.head_dim
    attention = [Linear("qkv", config.dim, q + 2 * kv)] if fused_qkv else [
        Linear("q", config.dim, q), Linear("k", config.dim, kv), Linear("v", config.dim, kv)]
    ffn = [Linear("gate_up", config.dim, 2 * config.ffn_dim)] if fused_gate_up else [
        Linear("gate", config.dim, config.ffn_dim), Linear("up", config.dim, config.ffn_dim)]
    return [*attention, Linear("o", q, config.dim), *ffn,
            Linear("down", config.ffn_dim, config.dim),
            Linear("output", config.dim, config.vocab_size, per_layer=False)]


def linear_problems(layer: Linear, tokens: int, data_type: str) \
        -> dict[str, GemmProblem]:
    def gemm(m: int, n: int, k: int, ta: str, tb: str) -> GemmProblem:
        return GemmProblem(m, n, k, 1, ta, tb, data_type, data_type, data_type, data_type,
                           compute_type_for(data_type))

    i, o = layer.in_features, layer.out_features
    return {"forward": gemm(o, tokens, i, "T", "N"),
            "input_grad": gemm(i, tokens, o, "N", "N"),
            "weight_grad": gemm(i, o, tokens, "N", "T")}


def training_step_problems(config: LlamaConfig, seq: int, micro_batch: int = 1,
                           data_type: str = "bf16_r", fused_qkv: bool = False,
                           fused_gate_up: bool = False,
                           first_layer_input_grad: bool = True) -> list[ProblemStat]:
    """Every GEMM of one forward+backward step, counted. ``first_layer_input_grad``: the
    first layer's inputs need a gradient (true when the embedding is trained)."""
    tokens = seq * micro_batch
    stats: list[ProblemStat] = []
    for layer in linears(config, fused_qkv, fused_gate_up):
        copies = config.n_layers if layer.per_layer else 1
        for kind, problem in linear_problems(layer, tokens, data_type).items():
            count = copies
            if kind == "input_grad" and not first_layer_input_grad \
                    and layer.name in ("q", "k", "v", "qkv"):
                count -= 1
            if count:
                stats.append(ProblemStat(problem, count, None, f"model:{layer.name}:{kind}"))
    return aggregate(stats)


def whole_model(stats: list[ProblemStat], config: LlamaConfig, tokens: int,
                model_layers: int) -> list[ProblemStat]:
    """The problems of a profile of ``config.n_layers`` blocks, scaled to ``model_layers``:
    every block runs the same GEMMs, so their counts and times grow by model_layers /
    n_layers; the output projection (dimensions dim x vocab x tokens) runs once per step
    at any depth and stays. Without this a 2-block profile of Llama-3.1-8B at seq 8192
    gives the output projection ~55 % of the GEMM FLOPs instead of ~7 %."""
    factor = model_layers / config.n_layers
    output = sorted((config.dim, config.vocab_size, tokens))
    scaled = []
    for stat in stats:
        p = stat.problem
        if p.batch_count == 1 and sorted((p.m, p.n, p.k)) == output:
            scaled.append(stat)
            continue
        scaled.append(replace(stat, count=round(stat.count * factor),
                              time_us=None if stat.time_us is None else stat.time_us * factor))
    return aggregate(scaled)
