"""Comparison of GEMM runs without and with a tuning bundle."""

import pytest

from imagebuild.inimage.tuning.bundle_format import Bundle, only_defaults
from imagebuild.inimage.tuning.problems import GemmProblem
from imagebuild.inimage.tuning.verify import (
    Measurement,
    ProblemComparison,
    git_version_mismatch,
    ignored_messages,
    judge,
    table,
)

PROBLEM = GemmProblem(4096, 8192, 14336, 1, "T", "N")


def row(before_us, after_us, before_kernel=None, after_kernel=None):
    return ProblemComparison(PROBLEM, Measurement(before_us, before_kernel),
                             Measurement(after_us, after_kernel))


def test_speedup_and_tflops():
    r = row(3100.0, 2950.4, "49257", "73211")
    assert r.tflops_before == PROBLEM.flops / 3100.0 / 1e6
    assert round(r.speedup, 4) == round(3100.0 / 2950.4, 4)
    verdict = judge([r])
    assert verdict.ok and verdict.reasons == ()
    assert table(verdict)[-1] == "tuning in effect"


def test_fails_when_no_kernel_changed():
    verdict = judge([row(3100.0, 3090.0, "49257", "49257")])
    assert not verdict.ok and "no problem changed its kernel" in verdict.reasons[0]


def test_fails_on_unknown_kernels_without_speedup():
    assert not judge([row(3100.0, 3050.0)]).ok
    assert judge([row(3100.0, 2600.0)]).ok


def test_library_said_it_ignored_the_file():
    output = ("reading tuning results from /tuning/tunableop_results0.csv\n"
              "[W Tunable.cpp:221] Failed validator: HIPBLASLT_VERSION\n")
    assert ignored_messages(output) == [
        "TunableOp ignored its results file: validator HIPBLASLT_VERSION differs"]
    verdict = judge([row(3100.0, 2600.0, "1", "2")], output)
    assert not verdict.ok


def test_git_version_rule():
    assert git_version_mismatch("Git Version: c7a3b1f2d", "c7a3b1f2d\n") is None
    assert "ignores the whole file" in git_version_mismatch("Git Version: 0123abc", "c7a3b1f2d")
    assert git_version_mismatch("transA,transB", "c7a3b1f2d") is not None
    verdict = judge([row(3100.0, 2600.0, "1", "2")],
                    override_check=git_version_mismatch("Git Version: x", "y"))
    assert not verdict.ok


def timed(median, spread_us, kernel):
    return Measurement(median, kernel, (median - spread_us / 2, median, median + spread_us / 2))


def test_a_problem_slower_beyond_noise_fails_and_is_named():
    other = GemmProblem(4096, 8192, 4096, 1, "T", "N")
    faster = ProblemComparison(other, timed(1000.0, 5.0, "a"), timed(800.0, 5.0, "b"))
    slower = ProblemComparison(PROBLEM, timed(3000.0, 30.0, "49257"),
                               timed(3300.0, 30.0, "73211"))  # +10 %, repeats within 1 %
    verdict = judge([faster, slower])
    assert not verdict.ok
    (reason,) = verdict.reasons
    assert reason.startswith(f"{PROBLEM.label()} is slower with the tuning: 3000.0 us -> "
                             "3300.0 us (+10.0%, beyond the noise of 3.0%")
    assert table(verdict)[2].endswith("SLOWER")


def test_slower_within_the_repeats_spread_is_noise():
    # +10 % but the repeats of the tuned side wander by 20 %: not a finding
    row_ = ProblemComparison(PROBLEM, timed(3000.0, 30.0, "1"), timed(3300.0, 660.0, "2"))
    assert abs(row_.noise - 0.2) < 1e-9 and not row_.slower
    assert judge([row_]).ok
    # the noise floor holds when repeats agree exactly
    assert ProblemComparison(PROBLEM, timed(3000.0, 0.0, "1"), timed(3080.0, 0.0, "2")).noise \
        == 0.03
    assert judge([ProblemComparison(PROBLEM, timed(3000.0, 0.0, "1"),
                                    timed(3080.0, 0.0, "2"))]).ok


#: TunableOp's results file from `tune gemm` on an NVIDIA H200 (torch 2.11.0+cu130), four
#: Llama-3.1-8B problems: the library's own choice won every one.
H200_RESULTS = """Validator,PT_VERSION,2.11.0
GemmTunableOp_BFloat16_NT,nt_4096_128256_8192_ld_4096_128256_4096,Default,10.9463
GemmTunableOp_BFloat16_TN,tn_128256_8192_4096_ld_4096_4096_128256,Default,11.0379
GemmTunableOp_BFloat16_NN,nn_4096_8192_128256_ld_4096_128256_4096,Default,10.6636
GemmTunableOp_BFloat16_NT,nt_4096_14336_8192_ld_4096_14336_4096,Default,1.31981
"""


@pytest.mark.parametrize(("rows", "files", "expected"), [
    (H200_RESULTS, {"tunableop": "tunableop_results.csv"}, "for all 4 problems"),
    (H200_RESULTS.replace("Default,1.31981", "Gemm_Hipblaslt_1_42,1.2"),
     {"tunableop": "tunableop_results.csv"}, None),
    (H200_RESULTS, {"tunableop": "tunableop_results.csv",
                    "hipblaslt_override": "override.txt"}, None),
    (H200_RESULTS, {"tunableop": "tunableop_results.csv", "te_algo": "te.csv"}, None),
    ("Validator,PT_VERSION,2.11.0\n", {"tunableop": "tunableop_results.csv"}, None),
])
def test_a_bundle_of_library_defaults_is_named_as_changing_nothing(
        tmp_path, rows, files, expected) -> None:
    (tmp_path / "tunableop_results0.csv").write_text(rows)
    bundle = Bundle(image_digest="", recipe="", hipblaslt_git_version=None,
                    torch_version="2.11.0+cu130", gpu_arch="NVIDIA H200", cu_count=132,
                    files=files)
    found = only_defaults(tmp_path, bundle)
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected in found and "changes no kernel" in found
