"""What a GEMM tuning run is tied to, found where it runs: the GPU (architecture, compute
units, last-level cache), TunableOp's validators and the hipBLASLt revision in them, why a
method cannot run here, the image's recipe and its hipblaslt-bench.

Standard library and torch only (torch imported where a GPU is asked about).
"""

from __future__ import annotations

import math
import os
import shutil
from typing import Any, cast

from ..gpu_data import load_gpu_data, match_gpu
from ..image_manifest import load_manifest, section
from ..options import DEFAULT_MANIFEST, MANIFEST_ENV

#: hipBLASLt's own rotating buffer when it tunes (HIPBLASLT_TUNING_FILE's default, MiB), used
#: when the GPU's last-level cache is not known.
DEFAULT_ROTATING_MB = 512
#: Operands rotate through this many times the last-level cache, as the gemm check's do.
ROTATE_OVER_CACHE = 2


def gpu_facts(index: int = 0) -> dict[str, Any]:
    """What a bundle is tied to about GPU ``index``: its architecture as the libraries name
    it (ROCm: the full gcnArchName, as TunableOp's GCN_ARCH_NAME validator; NVIDIA: sm_XY)
    and its compute-unit count (a column of every hipBLASLt override row). Without torch
    (find_exact.py's route needs none) there is no GPU to say anything about."""
    try:
        import torch
    except ImportError:
        return {"gpu": None, "torch": None}
    if not torch.cuda.is_available():
        return {"gpu": None}
    props = torch.cuda.get_device_properties(index)
    return {"gpu": props.name, "arch": getattr(props, "gcnArchName", None) or
            f"sm_{props.major}{props.minor}", "cu_count": props.multi_processor_count,
            "vendor": "amd" if torch.version.hip else "nvidia", "torch": torch.__version__,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "hip": torch.version.hip, "cuda": torch.version.cuda}


def tunableop_validators() -> dict[str, str]:
    """TunableOp's validators in this process (PT_VERSION, HIPBLASLT_VERSION, ...); empty
    where this torch has no TunableOp (CPU builds)."""
    try:
        from torch.cuda import tunable

        # torch's annotation says tuple[str, str]; it returns (name, value) pairs.
        validators = cast("tuple[tuple[str, str], ...]", tunable.get_validators())
        return {str(key): str(value) for key, value in validators}
    except (AttributeError, RuntimeError, ValueError):
        return {}


def hipblaslt_revision(validators: dict[str, str]) -> str | None:
    """The hipBLASLt git revision in TunableOp's HIPBLASLT_VERSION validator
    (``<version>-<git revision>``, pytorch/pytorch aten/src/ATen/cuda/tunable/Tunable.cpp)."""
    value = validators.get("HIPBLASLT_VERSION", "")
    return (value.rsplit("-", 1)[1] or None) if "-" in value else None


def skip_reason(method: str, facts: dict[str, Any], bench: str | None) -> str | None:
    import torch

    if facts["gpu"] is None:
        return "GPU-only: no GPU visible to torch"
    if method == "tunableop":
        version = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
        if version < (2, 6):
            return f"TunableOp offline tuning needs torch >= 2.6, this is {torch.__version__}"
    if method == "hipblaslt":
        if facts["vendor"] != "amd":
            return "hipBLASLt is ROCm-only; this GPU is not AMD"
        if not bench:
            return "no hipblaslt-bench (build the image with hipblaslt.clients, or pass --bench)"
    return None



def image_recipe() -> str:
    """The recipe the image was built from (its manifest), "" outside an image."""
    manifest, _ = load_manifest(os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST)
    return str((manifest or {}).get("recipe") or "")


def default_bench() -> str | None:
    """hipblaslt-bench: the manifest's (an image built with hipBLASLt clients), then PATH,
    then $ROCM_PATH/bin."""
    manifest, _ = load_manifest(os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST)
    bench = section(manifest, "hipblaslt").get("bench")
    if bench and os.access(str(bench), os.X_OK):
        return str(bench)
    return shutil.which("hipblaslt-bench") or shutil.which(
        "hipblaslt-bench", path=os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "bin"))


def rotating_mb(facts: dict[str, Any]) -> tuple[int, str]:
    """(rotating buffer in MiB, why): twice the last-level cache of the GPU in ``facts``
    (gpus.json's llc_mib: the Infinity Cache on CDNA 3, L2 elsewhere), so no operand is
    timed from the cache; DEFAULT_ROTATING_MB where the GPU or its cache is not known."""
    if facts.get("gpu"):
        arch = str(facts.get("arch") or "").split(":", 1)[0]
        model = match_gpu(load_gpu_data(), str(facts["gpu"]), arch,
                          facts.get("memory_gib")).model
        if model is not None and model.llc_mib:
            size = math.ceil(ROTATE_OVER_CACHE * model.llc_mib)
            return size, (f"{ROTATE_OVER_CACHE} x the {model.llc_mib:g} MiB last-level cache "
                          f"of {model.model}")
    return DEFAULT_ROTATING_MB, (f"hipBLASLt's tuning default ({DEFAULT_ROTATING_MB} MiB): "
                                 "the GPU's last-level cache is not known here")
