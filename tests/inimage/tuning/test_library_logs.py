"""hipBLASLt LOG_MASK=32 logs and TunableOp CSVs, in their real formats."""

import pytest

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning.library_logs import (
    detect_kind,
    parse_bench_line,
    problems_from_hipblaslt_log,
    problems_from_tunableop_csv,
)
from imagebuild.inimage.tuning.problems import ProblemError, write_csv
from imagebuild.tune.problem import read_csv

LOG_LINE = ("hipblaslt-bench --api_method c -m {m} -n 8192 -k 4096 --lda 4096 --ldb 4096 "
            "--ldc {m} --ldd {m}  --stride_a 0 --stride_b 0 --stride_c 0 --stride_d 0  "
            "--alpha 1.000000 --beta 0.000000 --transA T --transB N --batch_count 1  "
            "--a_type bf16_r --b_type bf16_r --c_type bf16_r --d_type bf16_r "
            "--scale_type f32_r --bias_type f32_r   --compute_type f32_r ")


def test_hipblaslt_log_counts_each_call(tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("\n".join([LOG_LINE.format(m=6144)] * 3 + ["unrelated line",
                              LOG_LINE.format(m=4096)]) + "\n")
    assert detect_kind(log) == "hipblaslt-log"
    stats = problems_from_hipblaslt_log(log)
    assert [(s.problem.m, s.count) for s in stats] == [(6144, 3), (4096, 1)]
    p = stats[0].problem
    assert (p.n, p.k, p.trans_a, p.trans_b, p.a_type, p.compute_type) == \
        (8192, 4096, "T", "N", "bf16_r", "f32_r")


def test_log_line_with_prefix_and_xf32():
    line = "[rank0] " + LOG_LINE.format(m=128).replace("--compute_type f32_r", "--compute_type xf32_r")
    assert parse_bench_line(line).compute_type == "f32_r"
    assert parse_bench_line("no bench here") is None


UNTUNED = """Validator,PT_VERSION,2.7.0
GemmTunableOp_BFloat16_TN,tn_6144_8192_4096_ld_4096_4096_6144
GemmTunableOp_BFloat16_NT,nt_4096_6144_8192_ld_4096_6144_4096
GemmStridedBatchedTunableOp_BFloat16_NN,nn_128_128_64_B_256_ld_128_64_128
GemmTunableOp_float_NT,nt_25088_4096_64,Gemm_Hipblaslt_1219,1.262
"""


def test_tunableop_rows_new_and_old_formats(tmp_path):
    path = tmp_path / "tunableop_untuned0.csv"
    path.write_text(UNTUNED)
    assert detect_kind(path) == "tunableop"
    found = {(s.problem.m, s.problem.n, s.problem.k, s.problem.batch_count, s.problem.trans_a,
              s.problem.trans_b, s.problem.a_type) for s in problems_from_tunableop_csv(path)}
    assert found == {(6144, 8192, 4096, 1, "T", "N", "bf16_r"),
                     (4096, 6144, 8192, 1, "N", "T", "bf16_r"),
                     (128, 128, 64, 256, "N", "N", "bf16_r"),
                     (25088, 4096, 64, 1, "N", "T", "f32_r")}


#: Rows as PyTorch writes them for linears with a bias (AMD's "PyTorch TunableOp offline"
#: blog, rocm.blogs.amd.com/artificial-intelligence/pytorch-tunableop-offline; a results row
#: of pytorch/pytorch test/test_linalg.py's seeded file) and an FP8 row of another op.
BIASED = """Validator,PT_VERSION,2.7.0
GemmAndBiasTunableOp_Half_TN,tn_768_1024_768_ld_768_768_768
GemmTunableOp_Half_TN,tn_768_1024_768_ld_768_768_768
GemmAndBiasTunableOp_float_TN,tn_768_32_1024_ld_1024_1024_768,Gemm_Hipblaslt_220580,0.0103395
ScaledGemmTunableOp_Float8_e4m3fnuz_Float8_e4m3fnuz_BFloat16_TN,tn_4096_8192_4096_ld_4096_4096_4096_rw_0_0
"""


def test_bias_rows_are_read_and_other_ops_do_not_abort_the_file(tmp_path):
    path = tmp_path / "tunableop_untuned0.csv"
    path.write_text(BIASED)
    stats = {(s.problem.m, s.problem.n, s.problem.k, s.problem.a_type): s
             for s in problems_from_tunableop_csv(path)}
    assert set(stats) == {(768, 1024, 768, "f16_r"), (768, 32, 1024, "f32_r")}
    assert stats[(768, 1024, 768, "f16_r")].count == 2
    assert stats[(768, 1024, 768, "f16_r")].origin == "tunableop,tunableop-bias"
    path.write_text("Validator,PT_VERSION,2.7.0\n" + BIASED.splitlines()[-1] + "\n")
    with pytest.raises(ProblemError, match=r"only 1 ScaledGemmTunableOp rows"):
        problems_from_tunableop_csv(path)


def test_bad_tunableop_row_names_the_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("Validator,PT_VERSION,2.7.0\nGemmTunableOp_BFloat16_TN,tn_61x_8192\n")
    with pytest.raises(ProblemError, match=r"bad.csv:2: cannot read TunableOp row"):
        problems_from_tunableop_csv(path)


def test_problems_csv_round_trip_and_errors(tmp_path):
    path = tmp_path / "log.txt"
    path.write_text(LOG_LINE.format(m=6144) + "\n")
    stats = problems_from_hipblaslt_log(path)
    write_csv(stats, tmp_path / "p.csv")
    assert read_csv(tmp_path / "p.csv") == stats
    text = (tmp_path / "p.csv").read_text().replace(",T,N,", ",X,N,")
    (tmp_path / "p.csv").write_text(text)
    with pytest.raises(TuneError, match=r"p.csv:2: transA: expected N or T, got 'X'"):
        read_csv(tmp_path / "p.csv")
