"""GEMM problems derived from the model's dimensions against the users' Megatron list."""

from dataclasses import replace

from imagebuild.inimage.model.llama import LLAMA_3_1_8B
from imagebuild.inimage.tuning.step_problems import linear_problems, linears, training_step_problems

#: [m, n, batch, k] the users listed for Llama-3.1-8B (Megatron, 32000 vocabulary, seq 8192,
#: micro-batch 1), taken by hand from a profiler trace.
USERS_LIST = {(14336, 4096, 1, 8192), (4096, 14336, 1, 8192), (8192, 14336, 1, 4096),
              (8192, 4096, 1, 6144), (8192, 4096, 1, 14336), (8192, 4096, 1, 4096),
              (6144, 4096, 1, 8192), (4096, 4096, 1, 8192), (8192, 4096, 1, 32000),
              (32000, 4096, 1, 8192), (8192, 6144, 1, 4096), (8192, 32000, 1, 4096)}


def megatron_8b():
    return training_step_problems(replace(LLAMA_3_1_8B, vocab_size=32000), 8192,
                                  fused_qkv=True)


def test_users_list_is_the_row_major_view_of_the_derived_problems():
    stats = megatron_8b()
    row_major = {(M, N, p.batch_count, K) for s in stats
                 for p in [s.problem] for (M, N, K) in [p.row_major()]}
    assert row_major == USERS_LIST


def test_in_hipblaslt_terms_m_and_n_are_swapped_and_transposes_split_shapes():
    stats = megatron_8b()
    column_major = {(s.problem.m, s.problem.n, 1, s.problem.k) for s in stats}
    assert column_major == {(n, m, b, k) for (m, n, b, k) in USERS_LIST}
    # 12 shapes, but forward (TN) and input-gradient (NN) GEMMs share three of them.
    assert len(stats) == 15
    assert {(s.problem.trans_a, s.problem.trans_b) for s in stats} == {("T", "N"), ("N", "N"),
                                                                       ("N", "T")}


def test_each_linear_runs_three_gemms_with_its_dimensions():
    qkv = next(layer for layer in linears(LLAMA_3_1_8B, fused_qkv=True) if layer.name == "qkv")
    assert (qkv.in_features, qkv.out_features) == (4096, 4096 + 2 * 1024)
    gemms = linear_problems(qkv, tokens=8192, data_type="bf16_r")
    fwd, dx, dw = gemms["forward"], gemms["input_grad"], gemms["weight_grad"]
    assert (fwd.m, fwd.n, fwd.k, fwd.trans_a, fwd.trans_b) == (6144, 8192, 4096, "T", "N")
    assert (dx.m, dx.n, dx.k, dx.trans_a, dx.trans_b) == (4096, 8192, 6144, "N", "N")
    assert (dw.m, dw.n, dw.k, dw.trans_a, dw.trans_b) == (4096, 6144, 8192, "N", "T")
    # Every multiply-add of the step is counted once: 6 x tokens x parameters of the linears.
    stats = megatron_8b()
    params = sum(layer.in_features * layer.out_features * (32 if layer.per_layer else 1)
                 for layer in linears(replace(LLAMA_3_1_8B, vocab_size=32000), fused_qkv=True))
    assert sum(s.count * s.problem.flops for s in stats) == 6 * 8192 * params


def output_share(stats, vocab):
    flops = {s.problem: s.count * s.problem.flops for s in stats}
    return sum(f for p, f in flops.items() if vocab in (p.m, p.n, p.k)) / sum(flops.values())


def test_a_two_block_profile_is_scaled_to_the_whole_model():
    from imagebuild.inimage.tuning.step_problems import whole_model

    two = LLAMA_3_1_8B.with_layers(2)
    profile = training_step_problems(two, 8192)
    assert round(output_share(profile, two.vocab_size), 2) == 0.55  # what ranking saw
    scaled = whole_model(profile, two, 8192, 32)
    assert {s.problem: s.count for s in scaled} == \
        {s.problem: s.count for s in training_step_problems(LLAMA_3_1_8B, 8192)}
    assert round(output_share(scaled, two.vocab_size), 2) == 0.07
