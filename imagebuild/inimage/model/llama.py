"""Llama-3.1 in plain torch, random weights: the model the train check steps.

Matches Meta's reference architecture (llama-models, llama3/model.py): pre-norm blocks
with RMSNorm (eps 1e-5), grouped-query attention (32 query heads, 8 KV heads for 8B),
rotary embeddings with theta 500000 and the "llama3" frequency scaling (factor 8, low/high
frequency factors 1 and 4, original context 8192), a SwiGLU feed-forward of width 14336
and an untied output projection over 128256 tokens. Attention is
F.scaled_dot_product_attention(is_causal=True), so a fused (flash) kernel runs where the
image has one. K and V are expanded to all query heads before SDPA, as torchtitan does,
so every SDPA backend accepts them.

Models are built on the meta device and materialised by ``init_weights`` after sharding
(FSDP2's pattern), so an 8B-wide model never exists unsharded on one device.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# The dimensions live in llama_config.py, standard library only (the host's `tune shapes
# --model` reads them without torch); re-exported for the model's users.
from .llama_config import LLAMA_3_1_8B, LLAMA_CPU_SMOKE, LlamaConfig, RopeScaling  # noqa: F401


def rope_frequencies(config: LlamaConfig) -> torch.Tensor:
    """Inverse frequencies of the rotary embedding, with llama3 scaling applied.

    Wavelengths shorter than original_context/high_freq_factor keep their frequency,
    longer than original_context/low_freq_factor are divided by ``factor``, and those in
    between are interpolated smoothly (Meta's apply_scaling).
    """
    dim = config.head_dim
    freqs = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    scaling = config.rope_scaling
    if scaling is None:
        return freqs.float()
    old = scaling.original_max_position_embeddings
    low_wavelen = old / scaling.low_freq_factor
    high_wavelen = old / scaling.high_freq_factor
    wavelen = 2 * math.pi / freqs
    smooth = (old / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor)
    interpolated = (1 - smooth) * freqs / scaling.factor + smooth * freqs
    scaled = torch.where(wavelen > low_wavelen, freqs / scaling.factor, interpolated)
    scaled = torch.where(wavelen < high_wavelen, freqs, scaled)
    return scaled.float()


def rope_tables(config: LlamaConfig, seq_len: int,
                device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    positions = torch.arange(seq_len, dtype=torch.float32, device=device)
    angles = torch.outer(positions, rope_frequencies(config).to(device))
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (x[2i], x[2i+1]) pairs by position * freq[i], in float32 (Meta's layout:
    interleaved pairs, as its view_as_complex does). x: (batch, seq, heads, head_dim)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    real, imag = pairs[..., 0], pairs[..., 1]
    cos = cos[: x.shape[1]].view(1, x.shape[1], 1, -1)
    sin = sin[: x.shape[1]].view(1, x.shape[1], 1, -1)
    rotated = torch.stack((real * cos - imag * sin, real * sin + imag * cos), dim=-1)
    return rotated.flatten(-2).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 (Meta's reference), return the input dtype.
        return F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps).type_as(x) * self.weight


class Attention(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.n_kv_heads = config.n_kv_heads
        self.head_dim = config.head_dim
        self.wq = nn.Linear(config.dim, config.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(config.dim, config.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(config.n_heads * self.head_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim)
        k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        repeats = self.n_heads // self.n_kv_heads
        if repeats > 1:  # KV head j serves query heads j*repeats .. (j+1)*repeats-1
            k = k.repeat_interleave(repeats, dim=2)
            v = v.repeat_interleave(repeats, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.w1 = nn.Linear(config.dim, config.ffn_dim, bias=False)
        self.w3 = nn.Linear(config.dim, config.ffn_dim, bias=False)
        self.w2 = nn.Linear(config.ffn_dim, config.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.attention_norm = RMSNorm(config.dim, config.norm_eps)
        self.attention = Attention(config)
        self.ffn_norm = RMSNorm(config.dim, config.norm_eps)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    # Buffers registered in __init__ (annotations only: nn.Module serves them).
    rope_cos: torch.Tensor
    rope_sin: torch.Tensor

    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.dim)
        self.layers = nn.ModuleList(TransformerBlock(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.output = nn.Linear(config.dim, config.vocab_size, bias=False)
        # Not parameters: recomputed by init_weights after the model leaves the meta device.
        self.register_buffer("rope_cos", torch.empty(config.max_seq_len, config.head_dim // 2),
                             persistent=False)
        self.register_buffer("rope_sin", torch.empty(config.max_seq_len, config.head_dim // 2),
                             persistent=False)

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Random weights (std 0.02, embeddings std 1, norms 1), identical on every rank
        for the same seed, and the RoPE tables."""
        torch.manual_seed(seed)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=1.0)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        cos, sin = rope_tables(self.config, self.config.max_seq_len, self.rope_cos.device)
        self.rope_cos.copy_(cos)
        self.rope_sin.copy_(sin)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.rope_cos, self.rope_sin)
        return self.output(self.norm(h))


def parameter_counts(config: LlamaConfig) -> dict[str, int]:
    """Parameters by part, from the config (no model needed)."""
    attention = config.dim * config.head_dim * (2 * config.n_heads + 2 * config.n_kv_heads)
    ffn = 3 * config.dim * config.ffn_dim
    per_layer = attention + ffn + 2 * config.dim
    embedding = config.vocab_size * config.dim
    output = config.vocab_size * config.dim
    total = config.n_layers * per_layer + embedding + output + config.dim
    return {"per_layer": per_layer, "embedding": embedding, "output": output,
            "total": total, "non_embedding": total - embedding}
