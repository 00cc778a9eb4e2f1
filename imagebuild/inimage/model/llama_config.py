"""Llama-3.1 dimensions: the configuration of the model the checks train (llama.py) and of
the GEMMs a step runs (tuning/step_problems.py). Standard library only, so the host's
``imagebuild tune shapes --model`` reads them without torch."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RopeScaling:
    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    n_layers: int = 32
    dim: int = 4096
    n_heads: int = 32
    n_kv_heads: int = 8
    ffn_dim: int = 14336
    vocab_size: int = 128256
    rope_theta: float = 500000.0
    rope_scaling: RopeScaling | None = RopeScaling()
    norm_eps: float = 1e-5
    max_seq_len: int = 8192

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def with_layers(self, n_layers: int) -> LlamaConfig:
        return replace(self, n_layers=n_layers)


#: Llama-3.1-8B (Meta's params.json: dim 4096, n_layers 32, n_heads 32, n_kv_heads 8,
#: ffn_dim_multiplier 1.3, multiple_of 1024 -> 14336, vocab 128256, rope_theta 500000).
LLAMA_3_1_8B = LlamaConfig()

#: CPU mode: the same architecture (GQA, scaled RoPE, RMSNorm, SwiGLU), small enough for
#: seconds per step on two cores.
LLAMA_CPU_SMOKE = LlamaConfig(n_layers=2, dim=256, n_heads=4, n_kv_heads=2, ffn_dim=768,
                              vocab_size=2048, max_seq_len=256)
