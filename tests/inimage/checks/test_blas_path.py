"""The gemm check's biased Linear (torch's addmm): which path it took, and whether the
environment sets what upstream says for the image's torch; and TransformerEngine's gfx942
setting in the environment check.

The two shapes of torch's getDisableAddmmCudaLt are compiled with gcc into libraries laid
out as torch's HIP library (the older one reads DISABLE_ADDMM_HIP_LT, the newer only
DISABLE_ADDMM_CUDA_LT), and the check reads them as it reads the image's. The path is
classified from a real profile of F.linear on this CPU and from the kernels the two GPU
paths launch; on a CPU the check says it cannot tell, and why."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from imagebuild.inimage.checks import blas_path, environment, gemm, te_settings
from imagebuild.inimage.result import FAILED, PASSED, SKIPPED, passed

#: getDisableAddmmCudaLt as pytorch/pytorch#114329 wrote it (ROCm: off unless "0") and as
#: later torches have it (only DISABLE_ADDMM_CUDA_LT, off when "1").
OLD = """#include <stdlib.h>
#include <string.h>
int getDisableAddmmCudaLt(void) {
  const char* v = getenv("DISABLE_ADDMM_CUDA_LT");
  if (v == 0) v = getenv("DISABLE_ADDMM_HIP_LT");
  return !(v != 0 && strcmp(v, "0") == 0);
}
"""
NEW = """#include <stdlib.h>
#include <string.h>
int getDisableAddmmCudaLt(void) {
  const char* v = getenv("DISABLE_ADDMM_CUDA_LT");
  return v != 0 && strcmp(v, "1") == 0;
}
"""


def hip_library(directory: Path, source: str) -> Path:
    gcc = shutil.which("gcc")
    assert gcc, "gcc builds the stand-ins of torch's HIP library"
    directory.mkdir(parents=True)
    (directory / "blas.c").write_text(source)
    out = directory / "libtorch_hip.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(out), str(directory / "blas.c")],
                   check=True)
    return out


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("torch-hip")
    return {"old": hip_library(root / "old", OLD), "new": hip_library(root / "new", NEW)}


def test_an_older_torch_bypasses_hiplt_unless_the_environment_sets_0(
        libraries: dict[str, Path]) -> None:
    unset = blas_path.addmm_setting({}, libraries["old"])
    assert unset["reads_hip_lt"] is True and unset["default"] == "bypass"
    assert unset["ok"] is False and "does not set it" in unset["why"]
    assert unset["source"] == "https://github.com/pytorch/pytorch/pull/114329"
    wrong = blas_path.addmm_setting({"DISABLE_ADDMM_HIP_LT": "1"}, libraries["old"])
    assert wrong["ok"] is False and "sets DISABLE_ADDMM_HIP_LT=1" in wrong["why"]
    right = blas_path.addmm_setting({"DISABLE_ADDMM_HIP_LT": "0"}, libraries["old"])
    assert right["ok"] is True and right["expected"] == "0"
    tunable = blas_path.addmm_setting({"DISABLE_ADDMM_HIP_LT": "0",
                                       "PYTORCH_TUNABLEOP_ENABLED": "1"}, libraries["old"])
    assert "pytorch/pytorch#124161" in tunable["why"]


def test_a_newer_torch_ignores_the_variable_and_says_so(libraries: dict[str, Path]) -> None:
    setting = blas_path.addmm_setting({"DISABLE_ADDMM_HIP_LT": "0"}, libraries["new"])
    assert setting["reads_hip_lt"] is False and setting["ok"] is True
    assert setting["default"] == "hipBLASLt"
    assert "DISABLE_ADDMM_HIP_LT=0 is set but has no effect" in setting["why"]
    forced = blas_path.addmm_setting({"DISABLE_ADDMM_CUDA_LT": "1"}, libraries["new"])
    assert "(it is: hipBLASLt is bypassed)" in forced["why"]


def test_a_torch_without_rocm_is_not_judged() -> None:
    assert torch.version.hip is None  # the test machine's CPU wheel
    setting = blas_path.addmm_setting({"DISABLE_ADDMM_HIP_LT": "1"})
    assert setting["reads_hip_lt"] is None and setting["ok"] is True
    assert "not a ROCm build" in setting["why"]


def real_linear_ops() -> list[str]:
    """What one biased F.linear dispatches on this CPU: addmm with the bias copied in."""
    x, weight, bias = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.nn.functional.linear(x, weight, bias)
    return [e.name for e in prof.events()]


#: Kernels of the two paths: hipBLASLt with the bias in its epilogue (a TensileLite kernel
#: name with "Bias"), and the bias copy then a rocBLAS GEMM.
LT_KERNELS = ["Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64_MI16x16x1"]
OTHER_KERNELS = ["void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>",
                 "Cijk_Alik_Bljk_BBS_BH_MT128x128x32_MI32x32x8_SN_LDSB1"]


def test_the_path_is_read_from_what_the_linear_dispatched() -> None:
    ops = real_linear_ops()
    assert "aten::addmm" in ops and "aten::copy_" in ops
    assert blas_path.classify(ops, OTHER_KERNELS)[0] == blas_path.OTHER
    fused = [op for op in ops if op != "aten::copy_"]
    path, why = blas_path.classify(fused, LT_KERNELS)
    assert path == blas_path.LT and "one kernel, no copy" in why
    assert blas_path.classify(fused, OTHER_KERNELS)[0] is None  # two kernels, no copy
    assert blas_path.classify(["aten::linear", "aten::matmul"], LT_KERNELS)[0] is None
    assert blas_path.classify(ops, [])[0] == blas_path.OTHER  # no device view: ops decide


def test_on_cpu_the_check_says_it_cannot_tell_and_why(make_context: Any) -> None:
    observed = blas_path.biased_linear(torch.device("cpu"))
    assert observed["path"] is None and "the CPU addmm has none" in observed["why"]
    result = gemm.run(make_context())
    assert result.status == SKIPPED
    assert "a biased Linear's path: cannot tell (no GPU" in result.reason
    assert result.figures["biased_linear"]["setting"]["reads_hip_lt"] is None


def test_the_gemm_check_fails_on_amd_when_the_environment_does_not_set_what_upstream_says(
        libraries: dict[str, Path]) -> None:
    measured = passed(gemm.NAME, "900.0 TFLOP/s = 69% of 1307.4 peak", {"tflops": 900.0})
    observed = {"path": blas_path.OTHER, "library": "hipBLAS/rocBLAS",
                "why": "the bias copied (aten::copy_), then the GEMM: 2 kernels"}
    bypass = {"observed": observed, "setting": blas_path.addmm_setting({}, libraries["old"])}
    result = gemm.with_biased_linear(measured, bypass, amd=True)
    assert result.status == FAILED
    assert "a biased Linear took the other BLAS path (hipBLAS/rocBLAS" in result.reason
    assert "unless DISABLE_ADDMM_HIP_LT=0" in result.reason
    assert "pytorch/pull/114329" in result.reason
    assert gemm.with_biased_linear(measured, bypass, amd=False).status == PASSED
    fixed = {"observed": {**observed, "path": blas_path.LT, "library": "hipBLASLt"},
             "setting": blas_path.addmm_setting({"DISABLE_ADDMM_HIP_LT": "0"},
                                                libraries["old"])}
    result = gemm.with_biased_linear(measured, fixed, amd=True)
    assert result.status == PASSED and "took the Lt path (hipBLASLt" in result.reason
    assert result.figures["biased_linear"]["setting"]["ok"] is True


# --- TransformerEngine's gfx942 setting (the environment check) -----------------------------

def test_te_on_gfx942_expects_the_fp32_atomics_setting() -> None:
    key = "NVTE_CK_IS_V3_ATOMIC_FP32"
    problems, notes, rows = te_settings.compare({key: "0"}, ("gfx942",), "this GPU")
    assert problems and f"{key}=0, AMD's training setups set 1" in problems[0]
    assert rows[0]["source"].startswith("ROCm/MAD scripts/primus/megatron-lm/")
    problems, notes, _ = te_settings.compare({}, ("gfx942",), "this GPU")
    assert not problems and "TE's own default applies" in notes[0]
    assert te_settings.compare({key: "1"}, ("gfx942",), "this GPU")[:2] == ([], [])
    assert te_settings.compare({key: "0"}, ("gfx90a", "gfx950"), "x") == ([], [], [])


def test_the_environment_check_reads_te_from_the_manifest_on_cpu(
        make_context: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    manifest = {"recipe": "t", "input_hash": "x", "rocm_version": None, "wheels": {},
                "python_version": ".".join(platform.python_version().split(".")[:2]),
                "gpu_targets": ["gfx942"], "transformer_engine": {"enabled": True}}
    monkeypatch.setenv("NVTE_CK_IS_V3_ATOMIC_FP32", "0")
    result = environment.run(make_context(manifest=manifest))
    assert result.status == FAILED
    assert "TransformerEngine on gfx942 (the image's targets; no AMD GPU here)" in result.reason
    monkeypatch.setenv("NVTE_CK_IS_V3_ATOMIC_FP32", "1")
    assert environment.run(make_context(manifest=manifest)).status == PASSED
    without = environment.run(make_context(manifest={**manifest, "transformer_engine": {
        "enabled": False}}))
    assert "transformer_engine_settings" not in without.figures
