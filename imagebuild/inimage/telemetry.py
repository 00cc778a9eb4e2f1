"""Telemetry beside each GPU check: what the GPU's clocks, power, temperature and throttle
reasons were while the figure was measured.

A figure 20 % low is explained by a GPU that ran at 1.4 instead of 2.0 GHz because it hit
its power cap; without this the report could only say it was low. A thread samples this
rank's GPU every half second (rocm-smi: every 2 s) while a check runs, through what the
image has:
- NVIDIA: NVML through nvidia-ml-py (``import pynvml``): SM and memory clocks, power,
  temperature and the clock event (throttle) reasons bitmask
  (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html);
- AMD: ``amd-smi metric`` where the image has it (clocks, power, temperatures and, on
  MI300 and newer, the throttle/violation status), else ``rocm-smi --json`` (no throttle
  state: said so).
Where none is there (CPU mode, or an image without either) the report says why.

The rank's GPU is found by its PCI address (BDF), never by torch's index: with
ROCR_VISIBLE_DEVICES=$SLURM_LOCALID every rank is torch's device 0, while amd-smi and
rocm-smi number all of the node's GPUs. NVML takes the BDF (below); ``amd-smi metric -g``
takes a BDF as well as an index ("Select a GPU ID, BDF, or UUID", amd-smi's parser:
https://github.com/ROCm/amdsmi/blob/amd-staging/amdsmi_cli/amdsmi_parser.py); rocm-smi
prints every card with ``--showbus`` ("PCI Bus", rocm_smi.py's showBus:
https://github.com/ROCm/rocm_smi_lib/blob/amd-staging/python_smi_tools/rocm_smi.py) and
the rank's card is picked by it.

Not run on AMD hardware here: the AMD readers are tested against recorded output shaped
like the tools' JSON (tests/inimage/test_telemetry.py).
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
#: rocm-smi and amd-smi are Python programs started per sample: less often, so that
#: eight ranks' samplers do not take the cores the checks are timing.
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


def _bdf(address: Any) -> str:
    """A PCI address as sysfs spells it: lower case, with its domain (rocm-smi prints
    0000:C1:00.0, some tools C1:00.0)."""
    text = str(address).strip().lower()
    return text if text.count(":") == 2 else f"0000:{text}"


def pick_rocm_smi_card(output: str, bdf: str) -> str:
    """The one card of ``rocm-smi --showbus ... --json`` (every card of the node) whose
    "PCI Bus" is ``bdf``, as a one-card document for parse_rocm_smi."""
    data = json.loads(output)
    cards = {name: card for name, card in (data.items() if isinstance(data, dict) else ())
             if isinstance(card, dict)}
    for name, card in cards.items():
        if _bdf(card.get("PCI Bus", "")) == _bdf(bdf):
            return json.dumps({name: card})
    listed = ", ".join(str(card.get("PCI Bus")) for card in cards.values()) or "none"
    raise LookupError(f"rocm-smi lists no card at PCI address {bdf} (it lists {listed})")


def _smi_tool(name: str, bdf: str | None, index: int) -> tuple[str, str]:
    """The SMI program ``name`` and the PCI address it is asked about: by address, since
    torch's index ``index`` need not be the tool's (ROCR_VISIBLE_DEVICES renumbers)."""
    tool = shutil.which(name)
    if tool is None:
        raise FileNotFoundError(f"no {name} on PATH")
    if bdf is None:
        raise LookupError("torch gives no PCI address for this GPU, and its index "
                          f"{index} need not be {name}'s (ROCR_VISIBLE_DEVICES)")
    return tool, bdf


def _rocm_smi_reader(bdf: str | None, index: int) -> tuple[Callable[[], dict[str, Any]], str]:
    tool, bdf = _smi_tool("rocm-smi", bdf, index)

    def read() -> dict[str, Any]:
        out = subprocess.run([tool, "--showbus", "--showtemp", "--showpower",
                              "--showclocks", "--json"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
        return parse_rocm_smi(pick_rocm_smi_card(out, bdf))
    read()  # fails here, once, when this rocm-smi cannot answer
    return read, "rocm-smi"


def _value(node: Any) -> float | None:
    """amd-smi's JSON gives {"value": v, "unit": u}, a bare number, or "N/A"."""
    if isinstance(node, dict):
        node = node.get("value")
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        return None
    return float(node)


#: amd-smi metric --throttle's "<what>_violation_status" keys (MI300 and newer; the
#: library's amdsmi_get_violation_status: PVIOL is ppt, TVIOL socket_thermal), by reason.
AMD_VIOLATIONS = {"ppt": "power_cap_ppt", "socket_thermal": "socket_thermal",
                  "prochot": "prochot", "vr_thermal": "vr_thermal",
                  "hbm_thermal": "hbm_thermal"}


def parse_amd_smi_metric(output: str) -> dict[str, Any]:
    """One sample from ``amd-smi metric -g BDF -p -c -t -T --json``: its GPU's socket power,
    gfx clock (the mean of its gfx_N domains, one per XCD on MI300), memory clock, hotspot
    (else edge) temperature and the violations active now. Both shapes amd-smi has
    printed are read: a list of GPUs, and {"gpu_data": [...]} in newer releases."""
    data = json.loads(output)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    gpu = gpus[0] if isinstance(gpus, list) and gpus and isinstance(gpus[0], dict) else {}
    sample: dict[str, Any] = {}
    power = gpu.get("power") or {}
    watts = _value(power.get("socket_power"))
    if watts is not None:
        sample["power_w"] = watts
    clocks = gpu.get("clock") or {}
    gfx = [v for name, clock in clocks.items() if name.startswith("gfx_")
           and isinstance(clock, dict) and (v := _value(clock.get("clk"))) is not None]
    if gfx:
        sample["sm_clock_mhz"] = round(sum(gfx) / len(gfx), 1)
    memory = _value((clocks.get("mem_0") or {}).get("clk")
                    if isinstance(clocks.get("mem_0"), dict) else None)
    if memory is not None:
        sample["memory_clock_mhz"] = memory
    temperatures = gpu.get("temperature") or {}
    for sensor in ("hotspot", "edge"):
        celsius = _value(temperatures.get(sensor))
        if celsius is not None:
            sample["temperature_c"] = celsius
            break
    throttle = gpu.get("throttle") or {}
    states = {reason: throttle.get(f"{key}_violation_status")
              for key, reason in AMD_VIOLATIONS.items()}
    if any(isinstance(state, bool) or str(state).upper() in ("ACTIVE", "NOT ACTIVE", "TRUE",
                                                              "FALSE")
           for state in states.values()):
        sample["reasons"] = [reason for reason, state in states.items()
                             if state is True or str(state).upper() in ("ACTIVE", "TRUE")]
    return sample


def _amd_smi_reader(bdf: str | None, index: int) -> tuple[Callable[[], dict[str, Any]], str]:
    tool, bdf = _smi_tool("amd-smi", bdf, index)

    def read() -> dict[str, Any]:
        out = subprocess.run([tool, "metric", "-g", bdf, "-p", "-c", "-t", "-T", "--json"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return parse_amd_smi_metric(out)
    read()  # fails here, once, when this amd-smi cannot answer
    return read, "amd-smi"


def open_reader(vendor: str, index: int, pci_bus_id: str | None
                ) -> tuple[Callable[[], dict[str, Any]] | None, str]:
    """(read one sample, what reads it) or (None, why there is none). On AMD, amd-smi
    first, then rocm-smi; the reason names why each could not read."""
    if vendor == "nvidia":
        try:
            return _nvml_reader(pci_bus_id, index)
        except Exception as exc:  # noqa: BLE001 - an import, a library that fails
            return None, f"NVML (nvidia-ml-py) not available: {type(exc).__name__}: {exc}"[:200]
    why = []
    for name, reader in (("amd-smi", _amd_smi_reader), ("rocm-smi", _rocm_smi_reader)):
        try:
            return reader(pci_bus_id, index)
        except Exception as exc:  # noqa: BLE001 - a tool missing, failing or not answering
            why.append(f"{name}: {type(exc).__name__}: {exc}"[:160])
    return None, "not available: " + "; ".join(why)


class Sampler:
    """Samples ``read`` every INTERVAL_S in a thread between start() and stop()."""

    def __init__(self, read: Callable[[], dict[str, Any]], source: str,
                 interval_s: float | None = None):
        self.read = read
        self.source = source
        self.interval_s = interval_s or (ROCM_SMI_INTERVAL_S if source in ("rocm-smi", "amd-smi")
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
