"""The Llama model and its FLOP count, against independent references."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from imagebuild.inimage.model.llama import (
    LLAMA_3_1_8B,
    Llama,
    LlamaConfig,
    apply_rope,
    parameter_counts,
    rope_frequencies,
    rope_tables,
)
from imagebuild.inimage.model.sizing import flops_per_token, mfu

TINY = LlamaConfig(n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=160, vocab_size=256,
                   max_seq_len=128)


def test_llama_3_1_8b_has_its_published_parameter_count() -> None:
    # Meta's Llama-3.1-8B checkpoint: 8,030,261,248 parameters.
    assert parameter_counts(LLAMA_3_1_8B)["total"] == 8_030_261_248


def test_parameter_counts_match_a_built_model() -> None:
    model = Llama(TINY)
    assert sum(p.numel() for p in model.parameters()) == parameter_counts(TINY)["total"]


def test_flops_per_token_matches_an_independent_count_of_a_training_step() -> None:
    """torch's FlopCounterMode counts every matmul of forward and backward (the math SDPA
    backend's bmm for attention, counted over the full s x s matrix as the formula does).
    Norm weights are in N but do no matmul: 6 FLOPs per weight per token to add back."""
    model = Llama(TINY)
    model.init_weights()
    seq = TINY.max_seq_len
    tokens = torch.randint(0, TINY.vocab_size, (1, seq + 1))
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    norm_weights = (2 * TINY.n_layers + 1) * TINY.dim
    counted = counter.get_total_flops() + 6 * norm_weights * seq
    assert counted == flops_per_token(TINY, seq) * seq
    # and the attention term is a real share here, so leaving it out would fail
    attention = 12 * TINY.n_layers * TINY.n_heads * TINY.head_dim * seq * seq
    assert attention / counted > 0.2


def test_flops_per_token_for_llama_8b_at_8k() -> None:
    # 6 * 7.5049e9 non-embedding parameters + 12 * 32 * 32 * 128 * 8192
    assert flops_per_token(LLAMA_3_1_8B, 8192) == 6 * 7_504_924_672 + 12 * 32 * 32 * 128 * 8192


def test_mfu_of_torchtitan_h100_number_is_in_its_published_range() -> None:
    # torchtitan: 5,762 tokens/s/GPU for Llama-3.1-8B on H100 (989 TFLOP/s), 33-39% MFU.
    value = mfu(5762, flops_per_token(LLAMA_3_1_8B, 8192), 989)
    assert 0.33 <= value <= 0.39


def _meta_apply_scaling(freqs: list[float]) -> list[float]:
    """Meta's llama3 apply_scaling, as a plain loop (llama-models reference)."""
    scale_factor, low_freq_factor, high_freq_factor, old_context_len = 8, 1, 4, 8192
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    new = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            new.append(freq)
        elif wavelen > low_freq_wavelen:
            new.append(freq / scale_factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (
                high_freq_factor - low_freq_factor)
            new.append((1 - smooth) * freq / scale_factor + smooth * freq)
    return new


def test_rope_frequencies_follow_llama3_scaling() -> None:
    dim = LLAMA_3_1_8B.head_dim
    base = [1.0 / (500000.0 ** (i / dim)) for i in range(0, dim, 2)]
    expected = torch.tensor(_meta_apply_scaling(base), dtype=torch.float32)
    got = rope_frequencies(LLAMA_3_1_8B)
    assert torch.allclose(got, expected, rtol=1e-6, atol=0)
    assert not torch.allclose(got, torch.tensor(base, dtype=torch.float32))  # scaling applied


def test_rope_rotates_interleaved_pairs_like_complex_multiplication() -> None:
    config = TINY
    cos, sin = rope_tables(config, 16)
    x = torch.randn(1, 16, 2, config.head_dim)
    angles = torch.outer(torch.arange(16, dtype=torch.float32), rope_frequencies(config))
    rotation = torch.polar(torch.ones_like(angles), angles)
    reference = torch.view_as_real(
        torch.view_as_complex(x.unflatten(-1, (-1, 2))) * rotation[None, :, None, :]).flatten(-2)
    assert torch.allclose(apply_rope(x, cos, sin), reference, atol=1e-5)


def test_grouped_query_attention_shares_each_kv_head_with_its_query_group() -> None:
    """Zeroing the V weights of KV head 0 silences exactly query heads 0..1 (4 heads, 2 KV)."""
    model = Llama(TINY)
    model.init_weights()
    attention = model.layers[0].attention
    with torch.no_grad():
        attention.wv.weight[: TINY.head_dim].zero_()
    x = torch.randn(1, 8, TINY.dim)
    cos, sin = model.rope_cos, model.rope_sin
    captured = {}
    original = F.scaled_dot_product_attention

    def spy(q, k, v, **kwargs):
        out = original(q, k, v, **kwargs)
        captured["out"] = out
        return out

    F.scaled_dot_product_attention = spy
    try:
        attention(x, cos, sin)
    finally:
        F.scaled_dot_product_attention = original
    per_head = captured["out"].abs().sum(dim=(0, 2, 3))
    assert per_head[0] == 0 and per_head[1] == 0
    assert per_head[2] > 0 and per_head[3] > 0
