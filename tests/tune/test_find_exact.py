"""The find_exact.py route without a container: a Megatron-LM + TransformerEngine trace
(fixtures/te-trace) becomes the problems and find_exact.py's configs; TE's ops and hipBLASLt's
markers are read as the upstream sources say; find_exact.py's output, in the format of
hipblaslt-bench's own client, becomes the same bundle as the bench route's.

The run of the real find_exact.py on the real bench is tests/tune/test_find_exact_debian.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from imagebuild.inimage.tuning import find_exact_tune, gemm_tuner
from imagebuild.inimage.tuning.bundle_format import read_bundle
from imagebuild.inimage.tuning.find_exact import (
    DEFAULT_BUILD_DIR,
    Settings,
    find_exact_layout,
    script_letters,
    write_configs,
)
from imagebuild.inimage.tuning.find_exact_run import read_results
from imagebuild.inimage.tuning.problems import read_csv
from imagebuild.inimage.tuning.te_trace import te_problems
from imagebuild.inimage.tuning.trace import problems_from_events, problems_from_trace

from .test_cli import run

FIXTURE = Path(__file__).parent / "fixtures" / "te-trace"
TRACE = FIXTURE / "megatron-te1-fp16-step.json"
FIND_EXACT = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "sources" / \
    "hipblaslt-find-exact" / "utilities" / "find_exact.py"
TOKENS, HIDDEN, QKV, FFN, VOCAB = 8192, 4096, 6144, 14336, 128256
#: Megatron-LM's TE linears of a Llama-3.1-8B layer: (in, out) features.
LINEARS = [(HIDDEN, QKV), (HIDDEN, HIDDEN), (HIDDEN, 2 * FFN), (FFN, HIDDEN)]


def expected_te_problems(dtype: str) -> set[tuple]:
    """What hipBLASLt runs for a TE Linear with ``in``/``out`` features over TOKENS rows, in
    its column-major terms (m, n, k, transA, transB, a_type, d_type): the forward output
    [tokens, out] is C = W(out x in)^T-applied: m = out, n = tokens, k = in (TN); dgrad
    [tokens, in]: m = in, n = tokens, k = out (NN); wgrad [out, in] into fp32: m = in,
    n = out, k = tokens (NT)."""
    found = set()
    for inputs, outputs in LINEARS:
        found |= {(outputs, TOKENS, inputs, "T", "N", dtype, dtype),
                  (inputs, TOKENS, outputs, "N", "N", dtype, dtype),
                  (inputs, outputs, TOKENS, "N", "T", dtype, "f32_r")}
    return found


def test_the_te_trace_gives_tes_gemms_and_megatrons_output_layer():
    stats, summary = problems_from_trace(TRACE)
    te = {(s.problem.m, s.problem.n, s.problem.k, s.problem.trans_a, s.problem.trans_b,
           s.problem.a_type, s.problem.d_type) for s in stats if "te-gemm" in s.origin}
    assert te == expected_te_problems("f16_r")
    assert summary["te_gemm_ops"] == 24 and summary["gemm_ops"] == 3
    # two layers: every TE GEMM twice
    assert all(s.count == 2 for s in stats if s.origin == "te-gemm")
    # Megatron's own output layer (plain torch): forward, dgrad, wgrad
    torch_side = {(s.problem.m, s.problem.n, s.problem.k) for s in stats
                  if s.origin == "trace"}
    assert torch_side == {(VOCAB, TOKENS, HIDDEN), (HIDDEN, TOKENS, VOCAB),
                          (HIDDEN, VOCAB, TOKENS)}


def test_the_trace_becomes_find_exacts_configs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run(["shapes", "--trace", str(TRACE), "--out", "problems.csv"]) == 0
    assert run(["gemm", "problems.csv", "--find-exact", "--write-only", "--rotating-mb",
                "512", "--out", "bundle"]) == 0
    out = capsys.readouterr().out
    configs = {p.stem: yaml.safe_load(p.read_text())
               for p in (tmp_path / "bundle" / "find_exact").glob("*.yaml")}
    assert set(configs) == {"TN_hhhh_s", "NN_hhhh_s", "NT_hhhh_s", "NT_hhss_s"}
    tn = configs["TN_hhhh_s"]["Bench"]
    assert tn["ProblemType"] == {"ComputeDataType": "s", "ComputeInputDataType": "h",
                                 "DataTypeA": "h", "DataTypeB": "h", "DataTypeC": "h",
                                 "DataTypeD": "h", "TransposeA": 1, "TransposeB": 0,
                                 "UseBias": False}
    assert tn["TestConfig"] == {"ColdIter": 20, "Iter": 100, "AlgoMethod": "all",
                                "RotatingBuffer": 512}
    assert tn["TuningParameters"] == {"SplitK": [0]}
    # rows [m, n, batch_count, k]: find_exact.py passes -m size[0] -n size[1] -k size[3]
    rows = {tuple(r) for name, c in configs.items() for r in c["Bench"]["ProblemSizes"]}
    wanted = {(m, n, 1, k) for m, n, k, *_ in expected_te_problems("f16_r")} | \
        {(VOCAB, TOKENS, 1, HIDDEN), (HIDDEN, TOKENS, 1, VOCAB), (HIDDEN, VOCAB, 1, TOKENS)}
    assert rows == wanted
    wgrad = configs["NT_hhss_s"]["Bench"]["ProblemType"]
    assert (wgrad["DataTypeA"], wgrad["DataTypeC"], wgrad["DataTypeD"]) == ("h", "s", "s")
    assert all(c.get("CreateLogic") == {} for c in configs.values())
    assert "run: python3 /opt/hipblaslt/tuning/utilities/find_exact.py" in out
    # docs/tune.md shows this config as written
    doc = (Path(__file__).resolve().parents[2] / "docs" / "tune.md").read_text()
    shown = doc.split("```\n# find_exact.py config written by", 1)[1].split("```", 1)[0]
    written = (tmp_path / "bundle" / "find_exact" / "TN_hhhh_s.yaml").read_text()
    assert "# find_exact.py config written by" + shown == written


def test_a_bf16_step_writes_bf16_configs(tmp_path):
    trace = tmp_path / "bf16.json"
    subprocess.run([sys.executable, str(FIXTURE / "make_trace.py"), str(trace), "--dtype",
                    "bf16", "--layers", "1"], check=True, capture_output=True)
    stats, _ = problems_from_trace(trace)
    configs, refused = write_configs(stats, tmp_path / "configs", Settings(20, 100, 512, "x"),
                                     "x")
    assert refused == []
    names = {c.path.stem for c in configs}
    assert names == {"TN_bbbb_s", "NN_bbbb_s", "NT_bbbb_s", "NT_bbss_s"}
    assert "DataTypeA: b" in (tmp_path / "configs" / "TN_bbbb_s.yaml").read_text()


def test_the_kept_find_exact_knows_no_bf16():
    assert script_letters(FIND_EXACT) == {"h", "s", "fp8"}


def marker(m, n, k, ta, tb, a_type="bf16_r"):
    return (f"hipblaslt-bench --api_method c -m {m} -n {n} -k {k} --lda {k} --ldb {k} "
            f"--ldc {m} --ldd {m} --stride_a 0 --stride_b 0 --stride_c 0 --stride_d 0 "
            f"--alpha 1.000000 --beta 0.000000 --transA {ta} --transB {tb} --batch_count 1 "
            f"--a_type {a_type} --b_type {a_type} --c_type {a_type} --d_type {a_type} "
            f"--scale_type f32_r --bias_type f32_r --compute_type f32_r --algo_method index "
            f"--solution_index 7")


def event(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def te_op(ts, a, b, transa, transb, ext, dtype=5, bias=(0,)):
    dims = [list(a), [0], [], [], [], list(b), [0], [], [], [], [1, 1], [0], [], [0],
            list(bias), [], [0], [], [536870912], [], [], []]
    concrete = ["", "", "-1", str(dtype), str(transa), "", "", "-1", str(dtype), str(transb),
                "", "", str(dtype), "", "", str(dtype), "", "0", "", "536870912", "0", "0"]
    return event("tex_ts::te_gemm_ts", ts, 100, **{"Input Dims": dims,
                                                   "Concrete Inputs": concrete,
                                                   "External id": ext})


def test_hipblaslts_markers_under_tes_ops_win_and_alone_count():
    """A marker inside a TE op is what hipBLASLt ran for it; a TE 2.x GEMM (generic_gemm, no
    torch op) is a marker under a Python frame; kernels give the TE op its time."""
    events = [
        te_op(0, (6144, 4096), (8192, 4096), 1, 0, ext=11),         # QKV forward, TN
        event(marker(6144, 8192, 4096, "T", "N"), 10, 0, cat="user_annotation"),
        te_op(200, (6144, 4096), (8192, 6144), 0, 0, ext=12),        # dgrad NN
        event(marker(4096, 8192, 6000, "N", "N"), 210, 0, cat="user_annotation"),
        event("transformer_engine/pytorch/cpp_extensions/gemm.py(70): general_gemm", 400,
              100, cat="python_function"),
        event(marker(14336, 8192, 4096, "T", "N"), 410, 0, cat="user_annotation"),
        event("Cijk_Alik_Bljk_BBS_BH", 1000, 55.0, cat="kernel", **{"External id": 11}),
    ]
    stats, counts = te_problems(events, {11: 55.0})
    assert counts == {"te_gemm_ops": 2, "hipblaslt_markers": 3, "markers_under_te_ops": 2,
                      "te_rule_differs_from_marker": 1, "with_bias": 0}
    got = {(s.problem.m, s.problem.n, s.problem.k, s.problem.trans_a): (s.time_us, s.origin)
           for s in stats}
    assert got[(6144, 8192, 4096, "T")] == (55.0, "te-gemm")
    assert (4096, 8192, 6000, "N") in got  # the marker's k, not TE's rule's 6144
    assert got[(14336, 8192, 4096, "T")] == (None, "hipblaslt-marker")


def test_an_empty_operand_is_no_gemm_and_a_bias_is_counted():
    events = [te_op(0, (0, 4096), (8192, 4096), 1, 0, ext=1),
              te_op(200, (1024, 4096), (8192, 4096), 1, 0, ext=2, bias=(1024,))]
    stats, counts = te_problems(events, {})
    assert [(s.problem.m, s.problem.n, s.problem.k) for s in stats] == [(1024, 8192, 4096)]
    assert counts["with_bias"] == 1 and counts["te_gemm_ops"] == 1


def test_a_trace_with_only_markers_is_read():
    stats, summary = problems_from_events(
        [event(marker(4096, 8192, 4096, "T", "N"), 0, 0, cat="user_annotation")] * 3)
    assert [(s.problem.m, s.count) for s in stats] == [(4096, 3)]
    assert summary["hipblaslt_markers"] == 3


def test_the_layout_comes_from_flags_env_manifest_then_default(tmp_path, monkeypatch):
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"hipblaslt": {"tuning_kit": {
        "find_exact": "/kit/utilities/find_exact.py", "build_dir": "/kit/build/release"}}}))
    monkeypatch.delenv("IMAGEBUILD_FIND_EXACT", raising=False)
    monkeypatch.delenv("IMAGEBUILD_HIPBLASLT_BUILD_DIR", raising=False)
    monkeypatch.setenv("IMAGEBUILD_MANIFEST", str(tmp_path / "absent.json"))
    assert find_exact_layout().build_dir == Path(DEFAULT_BUILD_DIR)
    monkeypatch.setenv("IMAGEBUILD_MANIFEST", str(manifest))
    layout = find_exact_layout()
    assert (str(layout.script), str(layout.bench), str(layout.match_table), layout.origin) == (
        "/kit/utilities/find_exact.py", "/kit/build/release/clients/staging/hipblaslt-bench",
        "/kit/build/release/library/MatchTable.yaml", "the image manifest's tuning kit")
    monkeypatch.setenv("IMAGEBUILD_HIPBLASLT_BUILD_DIR", "/env/build")
    assert find_exact_layout().build_dir == Path("/env/build")
    assert find_exact_layout(build_dir=Path("/flag")).origin == "the flags"


#: One size's output as hipblaslt-bench's client writes it with --print_kernel_info
#: (hipBLASLt clients/include/argument_model.hpp log_args and log_perf; testing_matmul.hpp
#: prints "Winner: "): each result a "[i]:"-prefixed header, the values indented by four
#: spaces, then the solution's index, name and kernel.
HEADER = ("transA,transB,grouped_gemm,batch_count,m,n,k,alpha,lda,stride_a,beta,ldb,stride_b,"
          "ldc,stride_c,ldd,stride_d,a_type,b_type,c_type,d_type,compute_type,scaleA,scaleB,"
          "scaleC,scaleD,amaxD,activation_type,bias_vector,bias_type,rotating_buffer,"
          "hipblaslt-Gflops,hipblaslt-GB/s,us")


def client_output(m, n, k, best, gflops):
    def result(i, index, speed):
        values = (f"T,N,0,1,{m},{n},{k},1,{k},{m * k},0,{k},{n * k},{m},{m * n},{m},{m * n},"
                  f"f16_r,f16_r,f16_r,f16_r,f32_r,0,0,0,0,0,none,0,f16_r,512,{speed},1234.5,"
                  f"{2 * m * n * k / (speed * 1e3):.4f}")
        return (f"[{i}]:{HEADER}\n    {values}\n    --Solution index: {index}\n"
                f"    --Solution name:  Cijk_Alik_Bljk_HHS_BH_MT{index}\n"
                f"    --kernel name:    Cijk_Alik_Bljk_HHS_BH_MT{index}_k\n")
    return (result(0, best - 1, gflops / 2) + result(1, best, gflops) + "Winner: \n"
            + result(1, best, gflops))


def test_the_clients_winner_is_read(tmp_path):
    directory = tmp_path / "TN_hhhh_s"
    (directory / "0_Bench").mkdir(parents=True)
    (directory / "0_Bench" / "result_TN_HHS_6144x8192x1x4096.txt").write_text(
        client_output(6144, 8192, 4096, 80213, 512000.0))
    (directory / "0_Bench" / "result_TN_HHS_4096x8192x1x4096.txt").write_text("")
    (directory / "find_exact.log").write_text(
        "Running benchmarks\n--Running size: result_TN_HHS_4096x8192x1x4096.txt\n"
        "Hip error: 'no ROCm-capable device is detected'(100)\n"
        "--Running size: result_TN_HHS_6144x8192x1x4096.txt\nCreating exact logic\n")
    done, failed = sorted(read_results(directory), key=lambda r: r.winner is None)
    assert done.winner.solution_index == 80213 and done.winner.gflops == 512000.0
    assert (done.m, done.n, done.batch_count, done.k) == (6144, 8192, 1, 4096)
    assert failed.winner is None and "no ROCm-capable device" in failed.tail[-1]


def test_find_exacts_winners_become_the_bench_routes_bundle(tmp_path, monkeypatch, capsys):
    """With find_exact.py's run standing in (the seam; the real one runs in the Debian
    test), its winners become hipBLASLt's override file and the bundle, as the bench route's."""
    problems = tmp_path / "problems.csv"
    run(["shapes", "--trace", str(TRACE), "--out", str(problems)])
    monkeypatch.setattr(gemm_tuner, "gpu_facts", lambda index=0: {
        "gpu": "AMD Instinct MI300X", "arch": "gfx942:sramecc+:xnack-", "cu_count": 304,
        "vendor": "amd", "torch": "2.9.1+rocm7.2.4", "memory_gib": 192.0})
    monkeypatch.setattr(gemm_tuner, "tunableop_validators",
                        lambda: {"HIPBLASLT_VERSION": "1.2.0-5cd5ed5b"})
    monkeypatch.setattr(find_exact_tune, "missing", lambda layout, configs: [])
    sizes = {}

    def gpu_run(layout, config, out, timeout_s):
        directory = out / config.path.stem
        (directory / "0_Bench").mkdir(parents=True, exist_ok=True)
        for m, n, b, k in config.sizes:
            ta, tb = config.problem_type.trans_a, config.problem_type.trans_b
            name = f"result_{ta}{tb}_X_{m}x{n}x{b}x{k}.txt"
            sizes[(m, n, k, ta, tb)] = 1000 + len(sizes)
            text = client_output(m, n, k, sizes[(m, n, k, ta, tb)], 400000.0)
            (directory / "0_Bench" / name).write_text(text.replace("T,N,", f"{ta},{tb},"))
        return subprocess.CompletedProcess([], 0, stdout="Running benchmarks\n")

    monkeypatch.setattr(find_exact_tune, "run", gpu_run)
    assert run(["gemm", str(problems), "--find-exact", "--out", str(tmp_path / "bundle")]) == 0
    out = capsys.readouterr().out
    assert "RotatingBuffer 512 MiB: 2 x the 256 MiB last-level cache of MI300X" in out
    bundle = read_bundle(tmp_path / "bundle")
    assert bundle.files == {"hipblaslt_override": "hipblaslt_override.txt"}
    assert bundle.hipblaslt_git_version == "5cd5ed5b" and bundle.cu_count == 304
    assert len(bundle.problems) == 15
    by_size = {(p.m, p.n, p.k, p.transA, p.transB): p.solution_index
               for p in bundle.problems}
    assert by_size == sizes
    override = (tmp_path / "bundle" / "hipblaslt_override.txt").read_text().splitlines()
    assert override[0] == "Git Version: 5cd5ed5b"
    assert all(len(row.split(",")) == 37 and row.endswith(",gfx942:sramecc+:xnack-,304")
               for row in override[1:])
    # the same bundle te-file reads: the solution indices become TE's algo ids
    assert run(["te-file", str(tmp_path / "bundle"), "--te-version", "2.2.0"]) == 0


def test_find_exact_that_cannot_run_names_what_is_missing(tmp_path, monkeypatch):
    problems = tmp_path / "problems.csv"
    run(["shapes", "--trace", str(TRACE), "--out", str(problems)])
    monkeypatch.setenv("IMAGEBUILD_MANIFEST", str(tmp_path / "none.json"))
    from imagebuild.errors import TuneError

    with pytest.raises(TuneError) as caught:
        run(["gemm", str(problems), "--find-exact", "--out", str(tmp_path / "b"),
             "--find-exact-script", str(tmp_path / "nope.py"), "--hipblaslt-build-dir",
             str(tmp_path / "build")])
    text = str(caught.value)
    assert f"no find_exact.py at {tmp_path / 'nope.py'} (the flags)" in text
    assert "clients/staging/hipblaslt-bench" in text and "library/MatchTable.yaml" in text
    assert read_csv(problems)  # the problems are untouched
