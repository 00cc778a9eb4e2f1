"""Telemetry beside each GPU check: what the GPU's clocks, power, temperature and throttle
reasons were while the figure was measured.

A figure 20 % low is explained by a GPU that ran at 1.4 instead of 2.0 GHz because it hit
its power cap; without this the report could only say it was low. A thread samples this
rank's GPU every half second (rocm-smi: every 2 s) while a check runs, through what the
image has:
- NVIDIA: NVML through nvidia-ml-py (``import pynvml``): SM and memory clocks, power,
  temperature and the clock event (throttle) reasons bitmask
  (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html);
- AMD: ``rocm-smi --showtemp --showpower --showclocks --json`` for the rank's GPU (its
  throttle state is not among what rocm-smi prints for every GPU: said so).
Where none is there (CPU mode, or an image without either) the report says why.
"""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import threading
from collections.abc import Callable
from typing import Any

INTERVAL_S = 0.5
#: rocm-smi is a Python program started per sample: less often, so that eight ranks'
#: samplers do not take the cores the checks are timing.
ROCM_SMI_INTERVAL_S = 2.0

#: NVML clock event reasons (nvml.h, nvmlClocksEventReason*), by bit.
NVML_REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
                0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
                0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
                0x100: "display_clock_setting"}


def decode_reasons(mask: int) -> list[str]:
    return [name for bit, name in NVML_REASONS.items() if mask & bit]


def _nvml_reader(pci_bus_id: str | None, index: int) -> tuple[Callable[[], dict[str, Any]], str]:
    # nvidia-ml-py, where the image has it (optional: the checks need only stdlib and torch)
    pynvml = importlib.import_module("pynvml")
    pynvml.nvmlInit()
    handle = None
    # By PCI address: NVML counts GPUs ignoring CUDA_VISIBLE_DEVICES, torch within it. Some
    # nvidia-ml-py releases take str, older ones bytes.
    for bus_id in ((pci_bus_id, pci_bus_id.encode()) if pci_bus_id else ()):
        try:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
            break
        except Exception:  # noqa: BLE001, S112 - NVMLError or a type the release refuses
            continue
    if handle is None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

    def read() -> dict[str, Any]:
        return {"sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                "memory_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle,
                                                                  pynvml.NVML_CLOCK_MEM),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                "temperature_c": pynvml.nvmlDeviceGetTemperature(
                    handle, pynvml.NVML_TEMPERATURE_GPU),
                "reasons": decode_reasons(int(reasons(handle)))}
    return read, "NVML (nvidia-ml-py)"


def _first_number(text: Any) -> float | None:
    digits = ""
    for char in str(text):
        if char.isdigit() or (char == "." and digits):
            digits += char
        elif digits:
            break
    try:
        return float(digits) if digits else None
    except ValueError:
        return None


def parse_rocm_smi(output: str) -> dict[str, Any]:
    """One sample from ``rocm-smi --json``'s card entry: its first temperature, power and
    sclk/mclk values, whatever this rocm-smi release names them."""
    data = json.loads(output)
    card = next(iter(data.values())) if isinstance(data, dict) and data else {}
    sample: dict[str, Any] = {}
    for key, value in card.items():
        lowered = key.lower()
        number = _first_number(value)
        if number is None:
            continue
        if "temperature" in lowered and "temperature_c" not in sample:
            sample["temperature_c"] = number
        elif "power" in lowered and "(w)" in lowered and "power_w" not in sample:
            sample["power_w"] = number
        elif lowered.startswith("sclk") and "speed" in lowered:
            sample["sm_clock_mhz"] = number
        elif lowered.startswith("mclk") and "speed" in lowered:
            sample["memory_clock_mhz"] = number
    return sample


def _rocm_smi_reader(index: int) -> tuple[Callable[[], dict[str, Any]], str]:
    tool = shutil.which("rocm-smi")
    if tool is None:
        raise FileNotFoundError("no rocm-smi on PATH")

    def read() -> dict[str, Any]:
        out = subprocess.run([tool, "-d", str(index), "--showtemp", "--showpower",
                              "--showclocks", "--json"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
        return parse_rocm_smi(out)
    read()  # fails here, once, when this rocm-smi cannot answer
    return read, "rocm-smi"


def open_reader(vendor: str, index: int, pci_bus_id: str | None
                ) -> tuple[Callable[[], dict[str, Any]] | None, str]:
    """(read one sample, what reads it) or (None, why there is none)."""
    try:
        if vendor == "nvidia":
            return _nvml_reader(pci_bus_id, index)
        return _rocm_smi_reader(index)
    except Exception as exc:  # noqa: BLE001 - an import, a library or a tool that fails
        what = "NVML (nvidia-ml-py)" if vendor == "nvidia" else "rocm-smi"
        return None, f"{what} not available: {type(exc).__name__}: {exc}"[:200]


class Sampler:
    """Samples ``read`` every INTERVAL_S in a thread between start() and stop()."""

    def __init__(self, read: Callable[[], dict[str, Any]], source: str,
                 interval_s: float | None = None):
        self.read = read
        self.source = source
        self.interval_s = interval_s or (ROCM_SMI_INTERVAL_S if source == "rocm-smi"
                                         else INTERVAL_S)
        self.samples: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self.read())
            except Exception as exc:  # noqa: BLE001 - one failed sample is recorded
                if len(self.errors) < 3:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:160])
            self._stop.wait(self.interval_s)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=15)
        return summarize(self.samples, self.source, self.errors, self.interval_s)


def summarize(samples: list[dict[str, Any]], source: str, errors: list[str] | None = None,
              interval_s: float = INTERVAL_S) -> dict[str, Any]:
    summary: dict[str, Any] = {"source": source, "samples": len(samples),
                               "interval_s": interval_s}
    for key in ("sm_clock_mhz", "memory_clock_mhz", "power_w", "temperature_c"):
        values = sorted(float(s[key]) for s in samples if isinstance(s.get(key), (int, float)))
        if values:
            summary[key] = {"min": values[0], "median": values[len(values) // 2],
                            "max": values[-1]}
    reasons: dict[str, int] = {}
    for sample in samples:
        for reason in sample.get("reasons", []):
            reasons[reason] = reasons.get(reason, 0) + 1
    if any("reasons" in s for s in samples):
        summary["throttle_reasons"] = reasons  # reason -> samples that showed it
    else:
        summary["throttle_reasons"] = f"not read by {source}"
    if errors:
        summary["errors"] = errors
    return summary
