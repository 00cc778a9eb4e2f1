"""The train step's memory plan against byte counts worked out here, independently.

Llama-3.1-8B: 8,030,261,248 parameters (Meta's checkpoint). FSDP2 with fp32 master weights
keeps per parameter a fp32 weight, a fp32 gradient and two fp32 AdamW moments: 16 bytes,
sharded over the ranks. Without checkpointing each block keeps, per token, bf16 activations
of 13 x 4096 (norm inputs and outputs, q, k, v, attention output, wo input) plus 4 x 14336
(SwiGLU) elements.
"""

from __future__ import annotations

import pytest

from imagebuild.inimage.model.llama import LLAMA_3_1_8B, LlamaConfig, parameter_counts
from imagebuild.inimage.model.step_plan import estimate, most_layers, plan_training

GB = 10**9
GIB = 2**30
PARAMS = 8_030_261_248
SEQ = 8192
ACTIVATIONS_PER_BLOCK = 2 * SEQ * (13 * 4096 + 4 * 14336)  # 1.81 GB
LOSS = SEQ * 128256 * (4 + 4 + 2)  # fp32 log-probs, their gradient, bf16 logits: 10.5 GB

#: Free memory torch reports at start (total minus the runtime's own): H100 80GB shows
#: 79.1 GiB in all; an MI250X GCD has 64 GiB; an MI300A's 128 GB are shared with the CPU.
H100_FREE = 79 * GIB
MI250X_GCD_FREE = 63 * GIB
MI300A_FREE = 110 * GIB


def test_one_h100_cannot_hold_the_model_so_it_runs_a_declared_proxy() -> None:
    # 16 bytes x 8.03e9 parameters = 128.5 GB of state on one rank: more than 80 GB
    assert 16 * PARAMS > 80 * GB
    plan = plan_training(LLAMA_3_1_8B, SEQ, 1, 1, H100_FREE)
    assert plan.workload == "proxy" and plan.is_proxy
    assert plan.activation_checkpointing == "full"
    assert 1 <= plan.layers < 32 and plan.full_layers == 32
    assert "even with activation checkpointing full" in plan.reason
    # the state alone of the full model is in the reason, as what does not fit
    full = next(e for e in plan.estimates
                if e["layers"] == 32 and e["activation_checkpointing"] == "full")
    assert full["sharded_state_gib"] == pytest.approx(16 * PARAMS / GIB, rel=1e-3)
    assert not full["fits"]
    # one block more than the proxy would not fit
    assert not estimate(LLAMA_3_1_8B, plan.layers + 1, SEQ, 1, H100_FREE, "full").fits


def test_eight_h100_train_all_32_blocks_with_selective_checkpointing() -> None:
    state = 16 * PARAMS / 8  # 16.1 GB per rank
    # without checkpointing: 32 blocks of activations + loss + state exceed 80 GB alone
    assert 32 * ACTIVATIONS_PER_BLOCK + LOSS + state > 80 * GB
    # every other block checkpointed halves the activations: well under 80 GB
    assert 16 * ACTIVATIONS_PER_BLOCK + LOSS + state < 0.8 * 80 * GB
    plan = plan_training(LLAMA_3_1_8B, SEQ, 1, 8, H100_FREE)
    assert plan.workload == "full" and plan.layers == 32
    assert plan.activation_checkpointing == "selective"  # torchtitan's 8xH100 setting


def test_eight_mi250x_gcds_need_full_checkpointing() -> None:
    state = 16 * PARAMS / 8
    # selective keeps 16 blocks' activations (29 GB), the loss (10.5 GB), the state
    # (16.1 GB) and the gathered embedding and output with their fp32 gradients (6.3 GB):
    # 62 GB, more than 90% of a GCD's 63 GiB free (60.9 GB)
    root = (2 * 128256 * 4096 + 4096) * (2 + 4)
    selective = 16 * ACTIVATIONS_PER_BLOCK + LOSS + state + root
    assert selective > 0.9 * MI250X_GCD_FREE
    plan = plan_training(LLAMA_3_1_8B, SEQ, 1, 8, MI250X_GCD_FREE)
    assert plan.workload == "full" and plan.layers == 32
    assert plan.activation_checkpointing == "full"


def test_four_mi300a_train_all_blocks() -> None:
    plan = plan_training(LLAMA_3_1_8B, SEQ, 1, 4, MI300A_FREE)
    assert plan.workload == "full" and plan.layers == 32
    assert plan.activation_checkpointing in ("selective", "full")


def test_activation_memory_falls_with_each_checkpointing_mode() -> None:
    totals = [estimate(LLAMA_3_1_8B, 32, SEQ, 8, H100_FREE, mode).activations
              for mode in ("none", "selective", "full")]
    assert totals[0] == 32 * ACTIVATIONS_PER_BLOCK
    assert totals[0] > totals[1] > totals[2]
    # full: each block's input, plus one block recomputed at a time
    assert totals[2] == 32 * 2 * SEQ * 4096 + ACTIVATIONS_PER_BLOCK


def test_a_named_mode_is_kept_and_too_little_memory_gives_no_layers() -> None:
    plan = plan_training(LLAMA_3_1_8B, SEQ, 1, 8, H100_FREE, ac="full")
    assert plan.workload == "full" and plan.activation_checkpointing == "full"
    assert most_layers(LLAMA_3_1_8B, SEQ, 1, 8 * GIB, "full") == 0
    starved = plan_training(LLAMA_3_1_8B, SEQ, 1, 1, 8 * GIB)
    assert starved.workload == "proxy" and starved.layers == 0


def test_train_layers_below_the_depth_is_a_proxy_by_request() -> None:
    plan = plan_training(LLAMA_3_1_8B, SEQ, 1, 8, H100_FREE, layers=4)
    assert plan.workload == "proxy" and plan.layers == 4
    assert "--train-layers 4" in plan.reason
    assert plan.activation_checkpointing == "none"  # 4 blocks fit without recompute


def test_a_small_model_fits_without_checkpointing() -> None:
    small = LlamaConfig(n_layers=4, dim=256, n_heads=4, n_kv_heads=2, ffn_dim=768,
                        vocab_size=2048, max_seq_len=256)
    plan = plan_training(small, 256, 1, 1, 8 * GIB)
    assert plan.workload == "full" and plan.activation_checkpointing == "none"


def test_a_block_in_flight_costs_eight_bytes_per_parameter() -> None:
    """bf16 parameters (2) + bf16 gradients (2) + the fp32 reduce-scatter input (4), for the
    block computed and the one prefetched; 6 bytes left the fp32 buffer or the bf16
    gradients out."""
    block = parameter_counts(LLAMA_3_1_8B)["per_layer"]
    plan = estimate(LLAMA_3_1_8B, 32, 8192, 8, 80 * GIB, "full")
    assert plan.blocks_in_flight == 2 * block * 8
    assert plan.root == 8 * (2 * 128256 * 4096 + 4096)


def test_hardware_flops_add_each_recomputed_blocks_forward() -> None:
    """Full checkpointing executes about 8N per token, not the 6N MFU counts."""
    from imagebuild.inimage.model.sizing import flops_per_token, recompute_flops_per_token

    model = flops_per_token(LLAMA_3_1_8B, 8192)
    assert recompute_flops_per_token(LLAMA_3_1_8B, 8192, 0) == 0
    full = recompute_flops_per_token(LLAMA_3_1_8B, 8192, 32)
    block = parameter_counts(LLAMA_3_1_8B)["per_layer"]
    assert full == 32 * (2 * block + 4 * 32 * 128 * 8192)
    blocks = 32 * block
    # blocks alone: 6 x blocks -> 8 x blocks; the whole step (output layer not recomputed)
    # lands between 1.25x and 1.34x
    assert (6 * blocks + 2 * blocks) / (6 * blocks) == pytest.approx(8 / 6)
    assert 1.25 < (model + full) / model < 8 / 6
