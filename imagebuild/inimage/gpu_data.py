"""The GPU peak table and thresholds (gpus.json) and the user's threshold overrides.

gpus.json, next to this module, is the single source for both sides: the host reads it
from here, and every image carries it inside its copy of this package. It is JSON, not
YAML, because the in-image checks read it with the standard library only.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_FILE = "gpus.json"
#: Environment variable naming another gpus.json (as --gpu-data does).
DATA_ENV = "IMAGEBUILD_GPU_DATA"


class UsageError(Exception):
    """Bad input to the in-image runner (flags, threshold file, data file): exit code 2."""


@dataclass(frozen=True)
class GpuModel:
    model: str
    vendor: str
    arch: str
    peak_bf16_dense_tflops: float
    source: str
    compute_units: int | None = None  # of the whole device (CUs on AMD, SMs on NVIDIA)
    llc_mib: float | None = None  # last-level cache: Infinity Cache on CDNA 3/4, else L2
    cache_source: str = ""


#: AMD's names for a device split into n compute partitions (amd-smi's accelerator
#: partition modes: https://rocm.docs.amd.com/projects/amdsmi/en/latest/conceptual/partition.html).
AMD_PARTITION_MODES = {1: "SPX", 2: "DPX", 3: "TPX", 4: "QPX", 6: "6-way", 8: "CPX"}


@dataclass(frozen=True)
class DevicePeak:
    """The bf16 peak of what torch sees: the table's device peak, scaled down when torch
    reports fewer compute units than the whole device has (a partition or MIG slice)."""

    tflops: float
    source: str
    partition: dict[str, Any] | None = None


def device_peak(model: GpuModel, multiprocessors: int | None) -> DevicePeak:
    """``model``'s peak for a device reporting ``multiprocessors`` CUs/SMs.

    MI300X in CPX mode shows each of its 8 XCDs as a device of 38 of its 304 CUs, MI300A
    in TPX mode 76 of 228: each does that share of the device's work per clock, so its
    peak is that share of the device's. Without the CU count (or the table's) the whole
    device's peak stands.
    """
    full = model.compute_units
    if not full or not multiprocessors or multiprocessors >= full:
        return DevicePeak(model.peak_bf16_dense_tflops, model.source)
    share = multiprocessors / full
    ways = round(full / multiprocessors)
    mode = (AMD_PARTITION_MODES.get(ways, f"{ways}-way") if model.vendor == "amd"
            else "MIG slice")
    tflops = round(model.peak_bf16_dense_tflops * share, 1)
    partition = {"mode": mode, "compute_units": multiprocessors, "device_compute_units": full,
                 "share": round(share, 4), "device_peak_tflops": model.peak_bf16_dense_tflops}
    return DevicePeak(tflops, f"{model.source}; {mode} partition: {multiprocessors} of "
                      f"{full} compute units -> {tflops:g} TFLOP/s", partition)


@dataclass(frozen=True)
class GpuMatch:
    """Which table entry a device matched, and how (the report says it)."""

    model: GpuModel | None
    how: str


def default_data_paths() -> list[Path]:
    # Part of this package, so every copy of the checks (in an image, too) carries it.
    return [Path(__file__).resolve().parent / DATA_FILE]


def load_gpu_data(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    candidates = [Path(path)] if path else (
        [Path(os.environ[DATA_ENV])] if os.environ.get(DATA_ENV) else default_data_paths())
    for candidate in candidates:
        if candidate.is_file():
            try:
                data = json.loads(candidate.read_text())
            except (OSError, ValueError) as exc:
                raise UsageError(f"{candidate}: not a readable JSON GPU table ({exc})") from exc
            _check_data(data, candidate)
            data["_path"] = str(candidate)
            return data
    raise UsageError("GPU table gpus.json not found (looked in: "
                     + ", ".join(str(c) for c in candidates) + "); pass --gpu-data PATH")


def _check_data(data: Any, path: Path) -> None:
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), list):
        raise UsageError(f"{path}: expected an object with a 'gpus' list")
    for i, entry in enumerate(data["gpus"]):
        for key in ("model", "vendor", "arch", "name_contains", "peak_bf16_dense_tflops"):
            if key not in entry:
                raise UsageError(f"{path}: gpus[{i}]: missing key {key!r}")
    thresholds = data.get("thresholds", {})
    if "default" not in thresholds:
        raise UsageError(f"{path}: thresholds.default is missing")
    models = {entry["model"] for entry in data["gpus"]}
    for i, entry in enumerate(data.get("vendor_figures", [])):
        missing = [k for k in ("gpus", "check", "figure", "kind", "value", "when", "by",
                               "source") if k not in entry]
        if missing:
            raise UsageError(f"{path}: vendor_figures[{i}]: missing {', '.join(missing)}")
        if entry["kind"] not in ("floor", "reference", "published"):
            raise UsageError(f"{path}: vendor_figures[{i}].kind {entry['kind']!r}: expected "
                             "floor, reference or published")
        unknown = [g for g in entry["gpus"] if g not in models]
        if unknown:
            raise UsageError(f"{path}: vendor_figures[{i}]: unknown GPU {', '.join(unknown)}")


def threshold_names(data: Mapping[str, Any]) -> list[str]:
    return sorted(data["thresholds"]["default"])


def model_names(data: Mapping[str, Any]) -> list[str]:
    return [entry["model"] for entry in data["gpus"]]


def _model(data: Mapping[str, Any], name: str) -> GpuModel | None:
    for entry in data["gpus"]:
        if entry["model"] == name:
            llc = entry.get("llc_mib")
            return GpuModel(entry["model"], entry["vendor"], entry["arch"],
                            float(entry["peak_bf16_dense_tflops"]), entry.get("source", ""),
                            entry.get("compute_units"), float(llc) if llc else None,
                            entry.get("cache_source", ""))
    return None


def match_gpu(data: Mapping[str, Any], name: str, arch: str | None,
              memory_gib: float | None = None) -> GpuMatch:
    """The table entry for a device: by marketing name first, then by architecture.

    ``name`` is torch.cuda.get_device_name(); ``arch`` the gcnArchName base on ROCm
    ('gfx942') or 'sm_90' on CUDA. A container without amdgpu.ids can report a generic
    name ('AMD Radeon Graphics'); then the architecture decides, and for gfx942 (MI300A,
    MI300X and MI325X share it) the device memory does.
    """
    lowered = (name or "").lower()
    for entry in data["gpus"]:
        if any(pattern.lower() in lowered for pattern in entry["name_contains"]):
            return GpuMatch(_model(data, entry["model"]), f"device name {name!r}")
    fallback = data.get("arch_fallback", {}).get(arch or "")
    if isinstance(fallback, str):
        return GpuMatch(_model(data, fallback), f"architecture {arch} (name {name!r} unknown)")
    if isinstance(fallback, dict) and memory_gib is not None:
        for floor, model in fallback.get("by_memory_gib", []):
            if memory_gib >= floor:
                return GpuMatch(_model(data, model),
                                f"architecture {arch} with {memory_gib:.0f} GiB (name {name!r} unknown)")
    return GpuMatch(None, f"no entry for name {name!r}, architecture {arch}")


def load_threshold_file(path: str | os.PathLike[str], data: Mapping[str, Any]) -> dict[str, Any]:
    """A user's overrides: JSON, either flat ``{key: value}`` or ``{model: {key: value}}``.

    The host (``imagebuild validate --thresholds x.yaml``) converts YAML to this JSON; the
    in-image runner reads JSON only (standard library).
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read thresholds ({exc.strerror})") from exc
    except ValueError as exc:
        hint = " (the in-image runner reads JSON; the host CLI also reads YAML)" \
            if path.suffix in (".yaml", ".yml") else ""
        raise UsageError(f"{path}: not valid JSON: {exc}{hint}") from exc
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: expected a JSON object of thresholds")
    validate_thresholds(raw, data, str(path))
    return raw


def validate_thresholds(raw: Mapping[str, Any], data: Mapping[str, Any], where: str) -> None:
    names = threshold_names(data)
    models = model_names(data) + ["default"]
    for key, value in raw.items():
        if key in names:
            _check_number(where, key, value)
        elif key in models:
            if not isinstance(value, dict):
                raise UsageError(f"{where}: {key}: expected an object of thresholds")
            for sub, number in value.items():
                if sub not in names:
                    raise UsageError(f"{where}: {key}.{sub}: unknown threshold{_did_you_mean(sub, names)}")
                _check_number(where, f"{key}.{sub}", number)
        else:
            raise UsageError(f"{where}: {key}: neither a threshold nor a GPU model"
                             f"{_did_you_mean(key, names + models)}")


def _check_number(where: str, key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise UsageError(f"{where}: {key}: expected a non-negative number, got {value!r}")


def _did_you_mean(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def effective_thresholds(data: Mapping[str, Any], model: str | None,
                         overrides: Mapping[str, Any] | None = None) -> dict[str, float]:
    """default < table entry for the model < user's flat keys < user's keys for the model."""
    table = data["thresholds"]
    result = dict(table["default"])
    if model and model in table:
        result.update(table[model])
    overrides = overrides or {}
    result.update({k: v for k, v in overrides.items() if not isinstance(v, dict)})
    if isinstance(overrides.get("default"), dict):
        result.update(overrides["default"])
    if model and isinstance(overrides.get(model), dict):
        result.update(overrides[model])
    return {k: float(v) for k, v in result.items()}
