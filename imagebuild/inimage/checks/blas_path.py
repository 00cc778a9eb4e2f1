"""Which path a biased Linear takes in torch's GPU addmm, and whether the environment sets
what upstream says for the image's torch.

torch's CUDA/HIP addmm (aten/src/ATen/native/cuda/Blas.cpp, addmm_out_cuda_impl) either
hands the bias to the Lt library's epilogue (gemm_and_bias: hipBLASLt on ROCm, cuBLASLt on
CUDA; one kernel, no copy) or copies the bias into the output first (``copy_``) and runs the
other BLAS's GEMM with beta=1 (hipBLAS/rocBLAS, cuBLAS). So the path shows in what one
``F.linear(x, W, b)`` dispatches, under torch's own profiler: an ``aten::copy_`` under
``aten::addmm`` and a second device kernel mean the other BLAS. No trace file is written.

On ROCm the choice also depended on an environment variable that changed meaning:
pytorch/pytorch#114329 (2023-12) added hipBLASLt "disabled by default. Enable with env var
DISABLE_ADDMM_HIP_LT=0" (getDisableAddmmCudaLt: DISABLE_ADDMM_CUDA_LT, else
DISABLE_ADDMM_HIP_LT, must be "0"; an enabled TunableOp bypasses it too, #124161); later
torches read DISABLE_ADDMM_CUDA_LT only and use hipBLASLt unless it is "1" (by the 2.6 release
branch the path "is controlled by the DISABLE_ADDMM_CUDA_LT env variable", ROCm/pytorch#2158).
Which one the image's torch is shows in its HIP library: the older code has the variable's
name as a string literal for getenv, the newer has none.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

HIP_LT_VARIABLE = "DISABLE_ADDMM_HIP_LT"
CUDA_LT_VARIABLE = "DISABLE_ADDMM_CUDA_LT"
SOURCE_OLD = "https://github.com/pytorch/pytorch/pull/114329"
SOURCE_NEW = "https://github.com/ROCm/pytorch/pull/2158"
LT = "Lt"
OTHER = "other BLAS"


def torch_hip_library() -> Path | None:
    """torch's HIP library (torch/lib/libtorch_hip.so), where its GPU addmm is compiled;
    None for a torch built without ROCm."""
    if not getattr(torch.version, "hip", None):
        return None
    path = Path(torch.__file__).parent / "lib" / "libtorch_hip.so"
    return path if path.is_file() else None


@lru_cache(maxsize=8)
def library_names(path: str, name: str) -> bool:
    """Whether the file holds ``name`` as a NUL-terminated string (a getenv literal)."""
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return data.find(name.encode() + b"\0") >= 0


def addmm_setting(env: Mapping[str, str], library: Path | None = None) -> dict[str, Any]:
    """What this torch's addmm does by default on ROCm and whether the environment sets what
    upstream says: {reads_hip_lt, default, expected, set, ok, why, source}."""
    library = library if library is not None else torch_hip_library()
    setting: dict[str, Any] = {HIP_LT_VARIABLE: env.get(HIP_LT_VARIABLE),
                               CUDA_LT_VARIABLE: env.get(CUDA_LT_VARIABLE)}
    if library is None:
        return {**setting, "reads_hip_lt": None, "ok": True, "why": (
            "torch is not a ROCm build: DISABLE_ADDMM_HIP_LT does not apply")}
    try:
        reads = library_names(str(library), HIP_LT_VARIABLE)
    except OSError as exc:
        return {**setting, "reads_hip_lt": None, "ok": True,
                "why": f"{library} is unreadable ({exc.strerror}): cannot tell"}
    setting.update(reads_hip_lt=reads, library=str(library))
    if not reads:
        ignored = (f"; {HIP_LT_VARIABLE}={env[HIP_LT_VARIABLE]} is set but has no effect"
                   if env.get(HIP_LT_VARIABLE) is not None else "")
        forced = env.get(CUDA_LT_VARIABLE) == "1"
        return {**setting, "default": "hipBLASLt", "ok": True, "source": SOURCE_NEW,
                "why": f"this torch reads {CUDA_LT_VARIABLE} only: a biased Linear uses "
                       f"hipBLASLt unless it is 1{' (it is: hipBLASLt is bypassed)' if forced else ''}"
                       f"{ignored}"}
    chosen = env.get(CUDA_LT_VARIABLE, env.get(HIP_LT_VARIABLE))
    tunable = env.get("PYTORCH_TUNABLEOP_ENABLED") == "1"
    ok = chosen == "0"
    why = (f"this torch bypasses hipBLASLt for a biased Linear unless {HIP_LT_VARIABLE}=0 "
           f"(upstream: {SOURCE_OLD}); "
           + ("the environment sets it" if ok else
              f"the environment sets {HIP_LT_VARIABLE}={chosen}" if chosen is not None else
              "the environment does not set it"))
    if tunable:
        why += "; PYTORCH_TUNABLEOP_ENABLED=1 bypasses it anyway (pytorch/pytorch#124161)"
    return {**setting, "default": "bypass", "expected": "0", "ok": ok, "source": SOURCE_OLD,
            "why": why}


def classify(ops: list[str], kernels: list[str] | None) -> tuple[str | None, str]:
    """(LT, OTHER or None, why) from the ops one biased F.linear dispatched and, where the
    profiler saw the device, its kernels."""
    if "aten::addmm" not in ops:
        return None, "F.linear did not dispatch to aten::addmm"
    copied = "aten::copy_" in ops
    if kernels is None or not kernels:
        seen = "no device kernels recorded"
        return (OTHER if copied else LT), (
            f"{'the bias was copied into the output (aten::copy_)' if copied else 'no bias copy'}"
            f"; {seen}")
    if copied and len(kernels) >= 2:
        return OTHER, f"the bias copied (aten::copy_), then the GEMM: {len(kernels)} kernels"
    if not copied and len(kernels) == 1:
        return LT, "the bias in the GEMM's epilogue: one kernel, no copy"
    return None, (f"unclear: {'a' if copied else 'no'} bias copy with {len(kernels)} "
                  f"kernel(s)")


def biased_linear(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> dict[str, Any]:
    """The path of one bf16 F.linear with a 1-D bias on ``device`` (a training shape)."""
    if device.type != "cuda":
        return {"path": None, "why": "no GPU: the Lt or other-BLAS choice is made in torch's "
                                     "CUDA/HIP addmm (aten/src/ATen/native/cuda/Blas.cpp); "
                                     "the CPU addmm has none"}
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(1024, 4096, device=device, dtype=dtype)
    weight = torch.randn(4096, 4096, device=device, dtype=dtype)
    bias = torch.randn(4096, device=device, dtype=dtype)
    torch.nn.functional.linear(x, weight, bias)  # loads the libraries, allocates workspaces
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        torch.nn.functional.linear(x, weight, bias)
        torch.cuda.synchronize(device)
    events = list(prof.events())
    ops = [e.name for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    kernels = [e.name for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    path, why = classify(ops, kernels)
    library = {LT: "hipBLASLt" if torch.version.hip else "cuBLASLt",
               OTHER: "hipBLAS/rocBLAS" if torch.version.hip else "cuBLAS"}.get(path or "")
    return {"path": path, "library": library, "why": why, "kernels": kernels[:4],
            "shape": [1024, 4096, 4096], "dtype": str(dtype).replace("torch.", "")}


def report(device: torch.device, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Both, for the gemm check's figures."""
    env = os.environ if environ is None else environ
    return {"observed": biased_linear(device), "setting": addmm_setting(env)}
