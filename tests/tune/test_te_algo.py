"""The file TransformerEngine loads (TE_HIPBLASLT_ALGO_LOAD), written from a bundle and read
back by the rules of TE's GemmAlgoCache (ROCm/TransformerEngine rocm_gemm.cu)."""

import json
from dataclasses import replace

import pytest

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning.bundle_format import BundleProblem, read_bundle, write_bundle
from imagebuild.tune.apply import runtime_tuning
from imagebuild.tune.te_algo import LEGENDS, TeKey, dev_cap, lookup, read_te_file

from .test_bundle_apply import make_bundle
from .test_cli import run

MI300 = 904  # gfx942: hipDeviceProp_t major 9, minor 4
#: Llama-3.1-8B's gate/up weight gradient, tuned by TunableOp on hipBLASLt; the same
#: problem solved by rocBLAS, and TunableOp's default, which TE cannot load.
TUNABLEOP = """Validator,PT_VERSION,2.8.0
GemmTunableOp_BFloat16_NT,nt_4096_14336_8192_ld_4096_14336_4096,Gemm_Hipblaslt_51377,3.91
GemmTunableOp_BFloat16_NN,nn_4096_8192_14336_ld_4096_14336_4096,Gemm_Rocblas_-1,3.2
GemmTunableOp_BFloat16_TN,tn_1024_8192_4096_ld_4096_4096_1024,Default,0.5
"""


@pytest.fixture()
def bundle_dir(tmp_path):
    bundle = make_bundle(tmp_path)  # 4096x8192x14336 TN bf16: hipblaslt-bench index 73211
    (tmp_path / "tunableop_results0.csv").write_text(TUNABLEOP)
    problems = (*bundle.problems,
                BundleProblem(4096, 14336, 8192, 1, "N", "T", "bf16_r"),
                BundleProblem(4096, 8192, 14336, 1, "N", "N", "bf16_r"),
                BundleProblem(128, 128, 64, 32, "N", "N", "bf16_r", None, None, 7))
    write_bundle(tmp_path, replace(bundle, problems=problems))
    return tmp_path


def key(m, n, k, ta, tb, lda, ldb, ldd, cap=MI300):
    return TeKey(cap, m, n, k, ta, tb, "bfloat16", "bfloat16", "bfloat16", "-", lda, ldb,
                 ldd, 0, "-")


def test_written_file_reads_back_by_tes_rules(bundle_dir, capsys):
    assert run(["te-file", str(bundle_dir), "--te-version", "2.4.0"]) == 0
    out = capsys.readouterr().out
    assert "2 algorithms ->" in out and "2 problems without a hipBLASLt solution" in out
    text = (bundle_dir / "te_hipblaslt_algos.csv").read_text()
    assert text.splitlines()[0] == LEGENDS["2025"]
    entries, said = read_te_file(text, devices=[MI300])
    assert said == [] and len(entries) == 2
    workspace = 32 * 2**20  # any workspace TE offers falls in the row's range
    bench = lookup(entries, key(4096, 8192, 14336, "T", "N", 14336, 14336, 4096), workspace)
    assert (bench.algo_id, bench.aidx) == (73211, 255)
    tunable = lookup(entries, key(4096, 14336, 8192, "N", "T", 4096, 14336, 4096), workspace)
    assert tunable.algo_id == 51377
    # another leading dimension, epilogue or device: another key, TE's own choice
    assert lookup(entries, key(4096, 8192, 14336, "T", "N", 16384, 14336, 4096), 0) is None
    assert read_te_file(text, devices=[900])[0] == []


def test_the_bundle_now_loads_it_at_run_time(bundle_dir):
    run(["te-file", str(bundle_dir), "--te-layout", "2025"])
    bundle = read_bundle(bundle_dir)
    assert bundle.files["te_algo"] == "te_hipblaslt_algos.csv"
    env = runtime_tuning(bundle_dir, bundle).env_dict()
    assert env["TE_HIPBLASLT_ALGO_LOAD"] == "/opt/imagebuild/tuning/te_hipblaslt_algos.csv"


def test_layouts_do_not_mix(bundle_dir):
    run(["te-file", str(bundle_dir), "--te-layout", "2024"])
    text = (bundle_dir / "te_hipblaslt_algos.csv").read_text()
    entries, _ = read_te_file(text, devices=[MI300], layout="2024")
    assert len(entries) == 2 and all(e.key.fp8_scale == 0 for e in entries)
    assert read_te_file(text, devices=[MI300]) == \
        ([], [f"Incorrect algo storage legend. Expected {LEGENDS['2025']}"])


def test_tes_skipping_rules():
    legend = LEGENDS["2025"]
    row = "904,8,8,8,N,N,bfloat16,bfloat16,bfloat16,-,8,8,8,0,-,f32,float32,0,100,5,0"
    text = "\n".join([legend, "# comment", "", "  " + row + "  ",
                      row.replace(",0,100,", ",0,50,"),   # overlaps: TE warns, drops
                      row.replace(",0,100,", ",200,100,"),  # ws_min > ws_max
                      row.replace("float32,0,100", "float16,0,100")])  # scale: skipped
    entries, said = read_te_file(text, devices=[904])
    assert len(entries) == 1 and entries[0].algo_id == 5
    assert said == ["[WARNING] Duplicated/overlapped entry in algo cache",
                    f"[WARNING] Invalid WS size at {row.replace(',0,100,', ',200,100,')}"]
    with pytest.raises(TuneError, match="type_a 'bf16'"):
        read_te_file(legend + "\n" + row.replace("bfloat16,bfloat16,bfloat16",
                                                 "bf16,bfloat16,bfloat16"), devices=[904])


def test_device_capability_of_architecture_names():
    assert [dev_cap(a) for a in ("gfx942:sramecc+:xnack-", "gfx90a", "gfx950", "gfx1100")] \
        == [904, 900, 905, 1100]
    with pytest.raises(TuneError, match="--dev-cap"):
        dev_cap("sm_90")


def test_nothing_to_write_leaves_the_bundle_as_it_was(tmp_path):
    bundle = make_bundle(tmp_path)
    write_bundle(tmp_path, replace(bundle, problems=(
        BundleProblem(64, 64, 64, 1, "N", "N", "bf16_r"),)))
    before = (tmp_path / "tuning.json").read_text()
    with pytest.raises(TuneError, match="no tuned problem with a hipBLASLt solution index"):
        run(["te-file", str(tmp_path), "--te-layout", "2025"])
    assert (tmp_path / "tuning.json").read_text() == before
    assert not (tmp_path / "te_hipblaslt_algos.csv").exists()
    assert "te_algo" not in json.loads(before)["files"]
