"""hipblaslt-bench output and override files, in the format of the hipBLASLt offline-tuning
how-to (ROCm/hipBLASLt docs/how-to-use-hipblaslt-offline-tuning.rst)."""

from imagebuild.inimage.tuning.bench import (
    bench_argv,
    override_file_text,
    override_row,
    parse_results,
    parse_winner,
    read_override_file,
    tunableop_line,
)
from imagebuild.inimage.tuning.library_logs import parse_tunableop_row

HEADER = ("transA,transB,grouped_gemm,batch_count,m,n,k,alpha,lda,stride_a,beta,ldb,stride_b,"
          "ldc,stride_c,ldd,stride_d,a_type,b_type,c_type,d_type,compute_type,scaleA,scaleB,"
          "scaleC,scaleD,amaxD,activation_type,bias_vector,bias_type,rotating_buffer,"
          "hipblaslt-Gflops,hipblaslt-GB/s,us")
VALUES = ("T,N,0,1,4096,8192,14336,1,14336,58720256,0,14336,117440512,4096,33554432,4096,"
          "33554432,bf16_r,bf16_r,bf16_r,bf16_r,f32_r,0,0,0,0,0,none,0,bf16_r,512,"
          "652301,144.2,2950.4")
TUNING_RUN = f"""[0]Device ID 0 : AMD Instinct MI300A gfx942:sramecc+:xnack-
with 228 CUs
./hipblaslt-bench --api_method c -m 4096 -n 8192 -k 14336 --transA T --transB N

Winner: 
{HEADER},soulution_index
{VALUES},73211
"""


def test_winner_block_gives_the_index_and_speed():
    winner = parse_winner(TUNING_RUN)
    assert winner is not None
    assert winner.solution_index == 73211
    assert winner.gflops == 652301.0 and winner.us == 2950.4
    assert winner.problem_key() == (4096, 8192, 14336, 1, "T", "N")


def test_later_builds_add_kernel_name_after_the_index():
    text = TUNING_RUN.replace(",soulution_index", ",solution_index,kernel_name") \
        .replace(",73211", ",73211,Cijk_Alik_Bljk_BBS_BH_MT256x256x64")
    winner = parse_winner(text)
    assert winner.solution_index == 73211
    row = override_row(winner, "gfx942", 228).split(",")
    assert len(row) == 37 and row[-3:] == ["73211", "gfx942", "228"]


def test_no_winner_without_the_block():
    assert parse_winner(TUNING_RUN.split("Winner:")[0]) is None


def test_override_file_round_trip():
    row = override_row(parse_winner(TUNING_RUN), "gfx942", 228)
    assert len(row.split(",")) == 37  # what UserDrivenTuningParser.cpp requires
    text = override_file_text("7d9fb683-dirty", [row])
    assert text.splitlines()[0] == "Git Version: 7d9fb683-dirty"
    version, rows = read_override_file(text)
    assert version == "7d9fb683-dirty" and rows == [row.split(",")]


def test_heuristic_candidates_with_kernel_info():
    text = f"{HEADER}\n[0]:\n{VALUES}\n--Solution index: 49257\n[1]:\n" \
           f"{VALUES.replace('652301', '411904')}\n--Solution index: 48934\n"
    assert parse_results(text) == [(652301.0, 49257), (411904.0, 48934)]


def test_bench_argv_and_tunableop_line_agree_on_the_problem():
    problem = {"m": "4096", "n": "8192", "k": "14336", "batch_count": "1", "transA": "T",
               "transB": "N", "a_type": "bf16_r", "b_type": "bf16_r", "c_type": "bf16_r",
               "d_type": "bf16_r", "compute_type": "f32_r"}
    argv = bench_argv("hipblaslt-bench", problem, 100, 20, 512)
    assert argv[argv.index("-m") + 1] == "4096" and argv[argv.index("--transA") + 1] == "T"
    assert argv[argv.index("--rotating") + 1] == "512"
    line = tunableop_line(problem)
    assert line == "GemmTunableOp_BFloat16_TN,tn_4096_8192_14336_ld_14336_14336_4096"
    parsed = parse_tunableop_row(*line.split(","))
    assert (parsed.m, parsed.n, parsed.k, parsed.trans_a, parsed.trans_b) == \
        (4096, 8192, 14336, "T", "N")
