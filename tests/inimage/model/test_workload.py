"""GEMM problems and collective sizes of a training step, derived from the model config."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from imagebuild.inimage.checks import gemm
from imagebuild.inimage.model.llama import LLAMA_3_1_8B, Llama, LlamaConfig
from imagebuild.inimage.model.workload import (
    fsdp_collectives,
    gemm_problems,
    group_shapes,
    megatron_collectives,
    padded_elements,
    read_gemm_problems,
)

TINY = LlamaConfig(n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=160, vocab_size=256,
                   max_seq_len=32)


def test_problems_hold_every_matmul_flop_of_a_real_training_step() -> None:
    """torch's FlopCounterMode over a real forward+backward (math SDPA): everything but
    the attention's two batched products is a linear's GEMM."""
    model = Llama(TINY)
    model.init_weights()
    seq = TINY.max_seq_len
    tokens = torch.randint(0, TINY.vocab_size, (1, seq + 1))
    with sdpa_kernel([SDPBackend.MATH]), FlopCounterMode(display=False) as counter:
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    attention = 12 * TINY.n_layers * TINY.n_heads * TINY.head_dim * seq * seq
    problems = gemm_problems(TINY, seq)
    assert sum(p.count * p.flops for p in problems) == counter.get_total_flops() - attention


def test_llama_8b_problems_at_8k_tokens() -> None:
    problems = {(p.m, p.n, p.k, p.trans_a, p.trans_b): p.count
                for p in gemm_problems(LLAMA_3_1_8B, 8192)}
    # K/V projections are 4096 -> 8 heads x 128 = 1024, in all three passes
    assert problems[(8192, 1024, 4096, False, True)] == 64  # wk, wv forward, 32 blocks
    assert problems[(8192, 4096, 1024, False, False)] == 64  # their grad input
    assert problems[(1024, 4096, 8192, True, False)] == 64  # their grad weight
    # the output projection over the 128256-token vocabulary, once per step
    assert problems[(8192, 128256, 4096, False, True)] == 1
    assert problems[(128256, 4096, 8192, True, False)] == 1
    assert not any(32000 in key for key in problems)
    assert len(problems) == 15


def test_recomputed_blocks_repeat_their_forward_products() -> None:
    plain = {(p.m, p.n, p.k, p.trans_b): p.count for p in gemm_problems(LLAMA_3_1_8B, 8192)}
    full = {(p.m, p.n, p.k, p.trans_b): p.count
            for p in gemm_problems(LLAMA_3_1_8B, 8192, recomputed_layers=32)}
    forward_w1_w3, grad_input_w2 = (8192, 14336, 4096, True), (8192, 14336, 4096, False)
    assert full[forward_w1_w3] == 2 * plain[forward_w1_w3] == 128
    assert full[grad_input_w2] == plain[grad_input_w2] == 32  # backward runs once
    assert full[(8192, 128256, 4096, True)] == 1  # the head is not in a block


def test_csv_in_hipblaslt_column_major_terms_round_trips(tmp_path: Path) -> None:
    problems = gemm_problems(LLAMA_3_1_8B, 8192)
    lines = ["m,n,k,transA,transB,batch_count,count"]
    for p in problems:
        t = p.hipblaslt_terms()
        lines.append(f"{t['m']},{t['n']},{t['k']},{t['transA']},{t['transB']},1,{p.count}")
    path = tmp_path / "problems.csv"
    path.write_text("\n".join(lines) + "\n")
    back = read_gemm_problems(path)
    assert [(p.m, p.n, p.k, p.trans_a, p.trans_b, p.count) for p in back] == [
        (p.m, p.n, p.k, p.trans_a, p.trans_b, p.count) for p in problems]
    # the forward of wq: torch x(8192x4096) @ W.T is hipBLASLt m=4096 n=8192 transA=T
    assert problems[0].hipblaslt_terms() == {"m": 4096, "n": 8192, "k": 4096,
                                             "transA": "T", "transB": "N"}


def test_bad_problem_files_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("m,n,k,transA,transB\n64,64,64,N,X\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: expected N or T"):
        read_gemm_problems(path)
    path.write_text("m,n,k\n64,64,64\n")
    with pytest.raises(ValueError, match=r"bad.csv:2: missing transA, transB"):
        read_gemm_problems(path)


def test_gemm_measures_problems_with_their_transposes_on_cpu() -> None:
    for problem in gemm_problems(TINY, 32):
        row = gemm.measure_problem(problem, torch.device("cpu"), target_s=0.001)
        assert row["flops"] == 2 * problem.m * problem.n * problem.k and row["tflops"] > 0
        assert row["count"] == problem.count


def test_fsdp_collective_sizes_come_from_the_block_and_the_root() -> None:
    gather, scatter, root_gather, root_scatter = fsdp_collectives(LLAMA_3_1_8B, 8)
    # one block: attention 4096 x 128 x (2 x 32 + 2 x 8) + SwiGLU 3 x 4096 x 14336 + 2 norms
    block = 4096 * 128 * (2 * 32 + 2 * 8) + 3 * 4096 * 14336 + 2 * 4096
    assert block == 218_112_000
    assert (gather.op, gather.bytes, gather.dtype) == ("all_gather", 2 * block, "bfloat16")
    assert (scatter.op, scatter.bytes, scatter.dtype) == ("reduce_scatter", 4 * block, "float32")
    assert "FSDP2 per block" in gather.source
    # the root group: embedding and output 128256 x 4096 each, and the final norm
    root = 2 * 128256 * 4096 + 4096
    assert root == 1_050_677_248
    assert (root_gather.op, root_gather.bytes, root_gather.dtype) == (
        "all_gather", 2 * root, "bfloat16")
    assert (root_scatter.op, root_scatter.bytes, root_scatter.dtype) == (
        "reduce_scatter", 4 * root, "float32")
    assert "FSDP2 root group" in root_gather.source and "padded" not in root_gather.source


def test_fsdp_sizes_are_padded_as_fsdp2_pads_for_world_sizes_that_do_not_divide_them() -> None:
    """12 and 24 ranks divide none of 4096, 1024 and 14336: every weight's dim 0 is rounded up
    to a multiple of the world size, as torch's own FSDP2 does (checked against it below)."""
    block_gather, block_scatter, _, _ = fsdp_collectives(LLAMA_3_1_8B, 12)
    # block on 12 ranks: 4096 -> 4104, 1024 -> 1032, 14336 -> 14340 rows; norms 4096 -> 4104
    block_12 = (2 * 4104 * 4096 + 2 * 1032 * 4096 + 2 * 14340 * 4096 + 4104 * 14336
                + 2 * 4104)
    assert block_12 == 218_390_544
    assert (block_gather.bytes, block_scatter.bytes) == (2 * block_12, 4 * block_12)
    assert "padded to 218,390,544 for 12 ranks" in block_gather.source
    # root on 24 ranks: 128256 = 24 x 5344 divides; the norm's 4096 rows pad to 4104
    root_gather = fsdp_collectives(LLAMA_3_1_8B, 24)[2]
    assert root_gather.bytes == 2 * (2 * 128256 * 4096 + 4104)


def test_padding_matches_torch_fsdp2_own_shard_sizes() -> None:
    """torch's FSDP2 helpers (the ones its collectives size their buffers with) agree."""
    fsdp_common = pytest.importorskip("torch.distributed.fsdp._fully_shard._fsdp_common")
    for world in (3, 12, 24):
        for shapes in group_shapes(TINY).values():
            expected = sum(fsdp_common._get_dim0_padded_size(torch.Size(s), world).numel()
                           for s in shapes)
            assert padded_elements(shapes, world) == expected


def test_megatron_reduce_scatter_is_fp32_gradients_of_the_gather_bucket() -> None:
    gather, scatter = megatron_collectives()
    assert (gather.op, gather.bytes, gather.dtype) == ("all_gather", 151_003_136, "bfloat16")
    # the same 75,501,568 elements at 4 bytes: fp32, not bf16
    assert (scatter.op, scatter.bytes, scatter.dtype) == ("reduce_scatter", 302_006_272,
                                                          "float32")
    assert scatter.bytes // 4 == gather.bytes // 2
    assert all("Megatron" in c.source for c in megatron_collectives())
