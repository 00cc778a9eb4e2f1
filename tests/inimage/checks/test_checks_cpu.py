"""The checks' own code on CPU: kernels timed for real, sysfs and manifests from files."""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend

from imagebuild.inimage.checks import attention, devices, environment, gemm, hipblaslt, network
from imagebuild.inimage.gpu import arch_supported
from imagebuild.inimage.model.workload import GemmProblem
from imagebuild.inimage.timing import calibrated_time, spread, time_loop

CPU = torch.device("cpu")


def test_gemm_code_runs_and_checks_results_on_cpu() -> None:
    assert gemm.check_correctness(CPU) is None
    problem = GemmProblem(128, 96, 64, True, False, 3, "test")
    row = gemm.measure_problem(problem, CPU, target_s=0.01)
    assert row["tflops"] > 0 and row["iters"] >= 5
    assert row["flops"] == 2 * 128 * 96 * 64 and row["count"] == 3 and row["trans_a"]


def test_attention_code_runs_on_cpu() -> None:
    backend = attention.default_backend(64, CPU, torch.float32)
    assert backend in ("flash_cpu", "math")
    assert attention.probe(SDPBackend.MATH, 64, CPU, torch.float32) is None
    timing = attention.measure(None, 64, CPU, torch.float32)
    assert timing["fwd_tflops"] > 0 and timing["fwd_bwd_tflops"] > 0
    assert timing["bwd_fwd_time_ratio"] > 0


def test_attention_probe_reports_why_a_backend_cannot_run() -> None:
    # The CUDA-only efficient kernel has no CPU implementation: the reason comes back.
    why = attention.probe(SDPBackend.EFFICIENT_ATTENTION, 64, CPU, torch.float32)
    assert why and isinstance(why, str)


def test_step_time_spread() -> None:
    values = [0.5, 0.1, 0.4, 0.2, 0.3, 0.6, 0.7, 0.8, 0.9, 1.0, 0.55]
    result = spread(values)
    assert result["median"] == 0.55 and result["min"] == 0.1 and result["max"] == 1.0
    assert result["p10"] == 0.2 and result["p90"] == 0.9 and result["count"] == 11
    assert spread([0.1, 0.3])["median"] == pytest.approx(0.2)


def test_timing_helpers() -> None:
    calls = []
    seconds = time_loop(lambda: calls.append(1), CPU, 7)
    assert len(calls) == 7 and seconds >= 0
    per_call, iters = calibrated_time(lambda: sum(range(1000)), CPU, warmup=1, target_s=0.01,
                                      min_iters=3, max_iters=50)
    assert per_call > 0 and 3 <= iters <= 50


def _manifest(**overrides) -> dict:
    base = {"recipe": "test", "input_hash": "sha256:00", "rocm_version": None,
            "python_version": ".".join(platform.python_version().split(".")[:2]),
            "wheels": {"torch": torch.__version__}, "gpu_targets": []}
    base.update(overrides)
    return base


def test_environment_matches_installed_versions() -> None:
    problems, _, figures = environment.compare(_manifest(), environment.installed_versions(),
                                                   None, None)
    assert problems == [] and figures["wheels_compared"] == 1


def test_environment_reports_every_mismatch() -> None:
    manifest = _manifest(python_version="3.9", wheels={"torch": "2.8.0+rocm7.0.2",
                                                        "not-a-real-wheel": "1.0"},
                         rocm_version="7.0.2", gpu_targets=["gfx942"])
    problems, _, figures = environment.compare(manifest, environment.installed_versions(),
                                               "gfx90a", "amd")
    text = "; ".join(problems)
    assert f"python {platform.python_version()}, manifest 3.9" in text
    assert f"torch {torch.__version__}, manifest 2.8.0+rocm7.0.2" in text
    assert "not-a-real-wheel not installed" in text
    assert f"torch {torch.__version__} is not a ROCm build (manifest ROCm 7.0.2)" in text
    assert "gfx90a is not among the image's targets gfx942" in text
    assert len(figures["wheels_mismatched"]) == 2


def test_environment_without_manifest_is_skipped_with_versions(make_context) -> None:
    ctx = make_context(manifest=None, manifest_problem="no manifest at /x (set ...)")
    result = environment.run(ctx)
    assert result.status == "skipped" and result.cause == "not_applicable"
    assert torch.__version__ in result.reason
    assert result.figures["versions"]["torch"] == torch.__version__


def _sysfs(root: Path, gpu: str, node: int, local: str) -> None:
    for n, cpus in ((0, "0-7"), (1, "8-15")):
        d = root / "devices" / "system" / "node" / f"node{n}"
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "distance").write_text("10 32\n" if n == 0 else "32 10\n")
    dev = root / "bus" / "pci" / "devices" / gpu
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text(f"{node}\n")
    (dev / "local_cpulist").write_text(local + "\n")


def test_affinity_far_from_the_gpu_fails(tmp_path: Path) -> None:
    _sysfs(tmp_path, "0000:c1:00.0", 1, "8-15")
    figures, problems, _ = devices.affinity_report({0, 1, 2, 3}, "0000:c1:00.0", tmp_path)
    assert problems and "far from GPU 0000:c1:00.0 on NUMA 1" in problems[0]
    assert figures["numa_distance_to_gpu"] == 32 and figures["cpus_near_gpu_fraction"] == 0.0


def test_affinity_near_the_gpu_passes_and_partial_is_noted(tmp_path: Path) -> None:
    _sysfs(tmp_path, "0000:c1:00.0", 1, "8-15")
    figures, problems, notes = devices.affinity_report({8, 9, 10}, "0000:c1:00.0", tmp_path)
    assert not problems and not notes and figures["numa_distance_to_gpu"] == 10
    _, problems, notes = devices.affinity_report({6, 7, 8, 9}, "0000:c1:00.0", tmp_path)
    assert not problems and "2 of 4 CPUs" in notes[0]


def test_affinity_without_pci_or_numa_is_noted_not_failed(tmp_path: Path) -> None:
    _sysfs(tmp_path, "0000:c1:00.0", -1, "")
    _, problems, notes = devices.affinity_report({0}, "0000:c1:00.0", tmp_path)
    assert not problems and "no NUMA node" in notes[0]
    _, problems, notes = devices.affinity_report({0}, None, tmp_path)
    assert not problems and "PCI address unknown" in notes[0]


def test_cpulist_round_trip() -> None:
    assert devices.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert devices.format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert devices.parse_cpulist("") == set()


def test_cpu_mode_devices_check_is_a_no_gpu_skip(make_context) -> None:
    result = devices.run(make_context())
    assert result.status == "skipped" and result.cause == "no_gpu"
    assert result.figures["cpu_count"] == len(os.sched_getaffinity(0))


def test_arch_support_lists() -> None:
    assert arch_supported("gfx942", ["gfx90a", "gfx942"])
    assert not arch_supported("gfx950", ["gfx90a", "gfx942"])
    assert arch_supported("sm_90", ["sm_80", "sm_90"])
    assert arch_supported("sm_90", ["sm_80", "compute_80"])  # PTX JIT
    assert not arch_supported("sm_90", ["sm_80", "sm_86"])


def test_hipblaslt_bench_output_parsing() -> None:
    output = ("transA,transB,M,N,K,alpha,lda,stride_a,beta,ldb,stride_b,ldc,stride_c,ldd,"
              "stride_d,d_type,compute_type,activation_type,bias_vector,hipblaslt-Gflops,us\n"
              "N,N,128,128,128,1,128,16384,0,128,16384,128,16384,128,16384,f32_r,f32_r,none,"
              "0, 415.278, 10.\n")
    assert hipblaslt.parse_gflops(output) == pytest.approx(415.278)
    assert hipblaslt.parse_gflops("no table here") is None


def test_hipblaslt_is_skipped_without_a_gpu_and_without_a_manifest_entry(make_context) -> None:
    result = hipblaslt.run(make_context(manifest={"hipblaslt": {"enabled": True,
                                                                "bench": "/opt/x"}}))
    assert result.status == "skipped" and result.cause == "no_gpu"


def _system_library() -> str:
    name = ctypes.util.find_library("m")
    assert name, "libm not found"
    for directory in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"):
        if Path(directory, name).exists():
            return str(Path(directory, name))
    pytest.fail(f"{name} not found in the usual directories")


def test_network_plugin_library_is_loaded_like_rccl_does(make_context, tmp_path: Path) -> None:
    good = make_context(manifest={"network_plugin": {"enabled": True, "kind": "aws-ofi-nccl",
                                                     "library": _system_library()}})
    result = network.run(good)
    assert result.status == "skipped" and result.cause == "no_gpu"
    assert result.figures["plugin_loads"] is True and "loads" in result.reason
    missing = make_context(manifest={"network_plugin": {"enabled": True,
                                                        "library": str(tmp_path / "librccl-net.so")}})
    result = network.run(missing)
    assert result.status == "failed" and "is missing" in result.reason
    broken = tmp_path / "librccl-net.so"
    broken.write_bytes(b"not an ELF file")
    result = network.run(make_context(manifest={"network_plugin": {"enabled": True,
                                                                   "library": str(broken)}}))
    assert result.status == "failed" and "does not load" in result.reason


def test_network_plugin_search_and_log_reading(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    shutil.copy(_system_library(), lib / "librccl-net.so")
    assert network.find_plugins({"LD_LIBRARY_PATH": f"/nonexistent:{lib}"}) == [
        str(lib / "librccl-net.so")]
    log = tmp_path / f"nccl.host1.{os.getpid()}.log"
    log.write_text("host1:1:1 [0] NCCL INFO Using network Socket\n")
    (tmp_path / "nccl.host1.1.log").write_text("another process\n")
    text, files = network.read_nccl_log(str(tmp_path / "nccl.%h.%p.log"))
    assert files == [str(log)] and "Using network Socket" in text


def test_whole_node_affinity_fails_only_when_binding_was_expected(tmp_path: Path) -> None:
    _sysfs(tmp_path, "0000:c1:00.0", 1, "8-15")
    every_cpu = set(range(16))
    _, problems, notes = devices.affinity_report(every_cpu, "0000:c1:00.0", tmp_path,
                                                 expected_binding=None, ranks_on_node=4)
    assert not problems and "all 16 CPUs of the node" in notes[0]
    _, problems, _ = devices.affinity_report(every_cpu, "0000:c1:00.0", tmp_path,
                                             expected_binding="--expect-binding",
                                             ranks_on_node=4)
    assert problems and "launcher was to bind it (--expect-binding)" in problems[0]
    # one rank alone on the node may use all of it
    _, problems, _ = devices.affinity_report(every_cpu, "0000:c1:00.0", tmp_path,
                                             expected_binding="--expect-binding",
                                             ranks_on_node=1)
    assert not problems
    # bound near its GPU: fine
    _, problems, _ = devices.affinity_report({8, 9}, "0000:c1:00.0", tmp_path,
                                             expected_binding="--expect-binding",
                                             ranks_on_node=4)
    assert not problems


def test_binding_is_expected_from_the_flag_or_slurm() -> None:
    assert devices.binding_expected(True, {}) == "--expect-binding"
    assert devices.binding_expected(False, {"SLURM_CPU_BIND_TYPE": "mask_cpu:"}) == (
        "SLURM_CPU_BIND_TYPE=mask_cpu:")
    assert devices.binding_expected(False, {"SLURM_CPU_BIND_TYPE": "none"}) is None
    assert devices.binding_expected(False, {}) is None


def test_gemm_rotates_operand_sets_larger_than_the_last_level_cache() -> None:
    """One reused set of operands stays partly in the cache (256 MB Infinity Cache on
    MI300X): the timed loop must walk through more bytes than the cache holds."""
    problem = GemmProblem(256, 128, 64, False, True, 1, "test")
    per_set = (256 * 64 + 64 * 128 + 256 * 128) * 2
    llc = 5 * per_set
    sets = gemm.rotating_operands(problem, CPU, llc)
    assert len(sets) == 10  # 2 x the cache, rounded up to whole sets
    assert len({a.data_ptr() for a, _, _ in sets}) == len(sets)
    assert all(b.shape == (64, 128) and not b.is_contiguous() for _, b, _ in sets)  # B.T view
    row = gemm.measure_problem(problem, CPU, target_s=0.01, llc_bytes=llc)
    assert row["rotating_sets"] == 10 and row["rotating_bytes"] > llc
    assert row["rotating_exceeds_cache"]


def test_gemm_visits_every_operand_set_in_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real_mm = torch.mm

    def recording_mm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        seen.append(a.data_ptr())
        return real_mm(a, b, out=out)

    monkeypatch.setattr(torch, "mm", recording_mm)
    problem = GemmProblem(64, 64, 64, False, False, 1, "test")
    row = gemm.measure_problem(problem, CPU, target_s=0.001, llc_bytes=3 * 64 * 64 * 2 * 3)
    assert len(set(seen)) == row["rotating_sets"] == 6
    assert all(seen[i] == seen[i - 6] for i in range(6, len(seen)))  # in turn, round again


def test_hipblaslt_figure_below_its_floor_fails() -> None:
    """A bench that runs at a fraction of the peak used to pass on any figure."""
    thresholds = {"hipblaslt_min_fraction": 0.35}
    slow = hipblaslt.evaluate(100.0, 1307.4, thresholds, "hipblaslt-bench", {})
    assert slow.status == "failed"
    assert "hipblaslt-bench bf16 GEMM 7.65% of peak, expected >= 35.0% of peak" in slow.reason
    fast = hipblaslt.evaluate(700.0, 1307.4, thresholds, "hipblaslt-bench", {})
    assert fast.status == "passed" and fast.figures["fraction_of_peak"] == 0.5354
    unknown = hipblaslt.evaluate(700.0, None, thresholds, "hipblaslt-bench", {})
    assert unknown.status == "skipped" and "--peak-tflops" in unknown.reason


FAKE_BENCH = '''#!{python}
import json, sys
if sys.argv[1:] == ["--help"]:
    print({help!r})
    sys.exit(0)
with open({log!r}, "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
print("transA,transB,M,N,K,hipblaslt-Gflops,us")
print("N,N,4096,4096,4096,650000.0,211.4")
'''


@pytest.mark.parametrize(("model", "help_text", "rotating"), [
    ("MI300X", "--rotating <value>  Use rotating memory blocks for each iteration, size in MB.",
     "512"),
    ("MI250X", "--rotating <value>  Use rotating memory blocks for each iteration, size in MB.",
     "16"),
    ("MI300X", "--iters |-i <value>  Iterations to run inside timing loop", None),
])
def test_hipblaslt_bench_operands_rotate_through_twice_the_last_level_cache(
        make_context, tmp_path: Path, model: str, help_text: str, rotating: str | None) -> None:
    """A stand-in hipblaslt-bench (a real executable) records the argv it is given: 512 MiB
    on MI300X (256 MB Infinity Cache), 16 on MI250X (8 MB L2), none when its --help does
    not list --rotating."""
    from imagebuild.inimage.gpu import DeviceInfo
    from imagebuild.inimage.gpu_data import load_gpu_data, match_gpu

    bench = tmp_path / "hipblaslt-bench"
    log = tmp_path / "argv.jsonl"
    bench.write_text(FAKE_BENCH.format(python=sys.executable, help=help_text, log=str(log)))
    bench.chmod(0o755)
    gpu = DeviceInfo(0, f"AMD Instinct {model}", "amd", "gfx942", 192.0, "0000:05:00.0", None,
                     304)
    ctx = make_context("--hipblaslt-bench", str(bench), mode="gpu", gpu=gpu,
                       gpu_match=match_gpu(load_gpu_data(), gpu.name, gpu.arch, 192.0),
                       peak_tflops=1307.4)
    result = hipblaslt.run(ctx)
    (argv,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert argv[:len(hipblaslt.BENCH_ARGS)] == list(hipblaslt.BENCH_ARGS)
    if rotating:
        assert argv[-2:] == ["--rotating", rotating]
        assert result.figures["operands"].startswith(f"rotated through {rotating} MiB")
    else:
        assert "--rotating" not in argv
        assert result.figures["operands"].startswith("reused every iteration")
    assert result.figures["tflops"] == 650.0
