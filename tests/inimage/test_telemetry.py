"""Telemetry beside each GPU check: clocks, power, temperature and throttle reasons, read
through what the image has, or the reason nothing could be read."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from imagebuild.inimage.telemetry import (
    Sampler,
    decode_reasons,
    open_reader,
    parse_amd_smi_metric,
    parse_rocm_smi,
    summarize,
)

# rocm-smi --showtemp --showpower --showclocks --json, as ROCm 6.x prints it for one card
ROCM_SMI = json.dumps({"card0": {
    "Temperature (Sensor edge) (C)": "41.0", "Temperature (Sensor junction) (C)": "48.0",
    "Current Socket Graphics Package Power (W)": "312.0", "sclk clock level:": "1",
    "sclk clock speed:": "(2100Mhz)", "mclk clock level:": "3", "mclk clock speed:": "(1300Mhz)"}})


def test_nvml_clock_event_reasons_are_decoded() -> None:
    assert decode_reasons(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_reasons(0) == []


def test_a_rocm_smi_sample_reads_temperature_power_and_clocks() -> None:
    assert parse_rocm_smi(ROCM_SMI) == {"temperature_c": 41.0, "power_w": 312.0,
                                        "sm_clock_mhz": 2100.0, "memory_clock_mhz": 1300.0}


def test_the_sampler_summarises_what_it_read_while_a_check_ran() -> None:
    values = iter(range(1000))

    def read() -> dict:
        value = next(values)
        return {"sm_clock_mhz": 1980 - value, "power_w": 600.0 + value, "temperature_c": 60,
                "reasons": ["sw_power_cap"] if value else []}

    sampler = Sampler(read, "test reader").start()
    time.sleep(1.2)
    summary = sampler.stop()
    assert summary["samples"] >= 2 and summary["source"] == "test reader"
    assert summary["sm_clock_mhz"]["max"] == 1980
    assert summary["throttle_reasons"] == {"sw_power_cap": summary["samples"] - 1}
    assert summarize([{"power_w": 1.0}], "rocm-smi")["throttle_reasons"] == \
        "not read by rocm-smi"


def test_without_nvml_the_reason_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # an image without nvidia-ml-py
    read, why = open_reader("nvidia", 0, None)
    assert read is None and why.startswith("NVML (nvidia-ml-py) not available: ")


def test_a_cpu_run_says_telemetry_was_not_available(tmp_path: Path) -> None:
    from tests.inimage.test_references import _run

    proc = _run(tmp_path, {"system": "x", "gpus": {"cpu": {
        "collectives.busbw_gbps_at_largest.all_gather": [1e-9, 0.0, None, "GB/s"]}}})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["telemetry"] == "not available: CPU mode, no GPU to read"


def test_the_nvml_reader_finds_the_gpu_by_pci_address(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the seam: a stand-in for nvidia-ml-py that, like older releases, takes bytes."""
    import types

    class NVMLError(Exception):
        pass

    calls: list[object] = []

    def by_bus(bus_id: object) -> str:
        calls.append(bus_id)
        if not isinstance(bus_id, bytes):
            raise TypeError("bytes expected")
        return "handle"

    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None, nvmlDeviceGetHandleByPciBusId=by_bus,
        nvmlDeviceGetHandleByIndex=lambda i: pytest.fail("found by index, not PCI address"),
        nvmlDeviceGetClockInfo=lambda h, kind: 1980 if kind == 0 else 2619,
        nvmlDeviceGetPowerUsage=lambda h: 650_000,
        nvmlDeviceGetTemperature=lambda h, kind: 61,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    read, source = open_reader("nvidia", 3, "0000:c1:00.0")
    assert read is not None and source == "NVML (nvidia-ml-py)"
    assert calls == ["0000:c1:00.0", b"0000:c1:00.0"]
    assert read() == {"sm_clock_mhz": 1980, "memory_clock_mhz": 2619, "power_w": 650.0,
                      "temperature_c": 61, "reasons": ["sw_power_cap"]}


# --- AMD: amd-smi first, rocm-smi second, the rank's GPU found by its PCI address --------
#
# Recorded-shape output, not captured on AMD hardware: the keys follow amd-smi's CLI
# (amdsmi_cli/amdsmi_commands.py, metric: power.socket_power, clock.gfx_N/mem_0.clk,
# temperature.edge/hotspot/mem, throttle.<what>_violation_status from
# amdsmi_get_violation_status, {"value", "unit"} objects in --json;
# https://github.com/ROCm/amdsmi) and rocm-smi's (rocm_smi.py: one "cardN" object per GPU,
# "PCI Bus" from --showbus; https://github.com/ROCm/rocm_smi_lib).

NODE = {  # one MI300X node's four GPUs: physical index -> BDF
    0: "0000:05:00.0", 1: "0000:26:00.0", 2: "0000:46:00.0", 3: "0000:65:00.0"}


def _amd_smi_gpu(index: int) -> dict:
    def v(value: float, unit: str) -> dict:
        return {"value": value, "unit": unit}

    throttled = index == 2  # the one GPU at its power cap
    return {
        "gpu": index,
        "power": {"socket_power": v(750 if throttled else 540 + index, "W"),
                  "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A",
                  "throttle_status": "N/A", "power_management": "ENABLED"},
        "clock": {**{f"gfx_{x}": {"clk": v(1700 + 10 * x if throttled else 2100, "MHz"),
                                  "min_clk": v(500, "MHz"), "max_clk": v(2100, "MHz"),
                                  "clk_locked": "N/A", "deep_sleep": "DISABLED"}
                     for x in range(8)},
                  "mem_0": {"clk": v(1300, "MHz"), "min_clk": v(900, "MHz"),
                            "max_clk": v(1300, "MHz"), "clk_locked": "N/A",
                            "deep_sleep": "DISABLED"},
                  "vclk_0": {"clk": "N/A", "min_clk": "N/A", "max_clk": "N/A",
                             "clk_locked": "N/A", "deep_sleep": "N/A"}},
        "temperature": {"edge": "N/A", "hotspot": v(80 + index, "C"), "mem": v(60, "C")},
        "throttle": {"accumulation_counter": 1234, "prochot_accumulated": 0,
                     "ppt_accumulated": 400 if throttled else 0,
                     "socket_thermal_accumulated": 0, "vr_thermal_accumulated": 0,
                     "hbm_thermal_accumulated": 0,
                     "prochot_violation_status": False, "ppt_violation_status": throttled,
                     "socket_thermal_violation_status": False,
                     "vr_thermal_violation_status": False,
                     "hbm_thermal_violation_status": False,
                     "prochot_violation_activity": v(0, "%"),
                     "ppt_violation_activity": v(32 if throttled else 0, "%"),
                     "socket_thermal_violation_activity": v(0, "%"),
                     "vr_thermal_violation_activity": v(0, "%"),
                     "hbm_thermal_violation_activity": v(0, "%")}}


FAKE_AMD_SMI = '''#!{python}
import json, sys
node = {node}
argv = sys.argv[1:]
assert argv[:2] == ["metric", "-g"] and argv[3:] == ["-p", "-c", "-t", "-T", "--json"], argv
bdf = argv[2].lower()
found = [gpu for index, gpu in node.items() if {bdfs}[index] == bdf]
if not found:
    sys.exit("amd-smi: invalid GPU " + bdf)
print(json.dumps({shape}))
'''

FAKE_ROCM_SMI = '''#!{python}
import json, sys
assert sys.argv[1:] == ["--showbus", "--showtemp", "--showpower", "--showclocks",
                        "--json"], sys.argv
print(json.dumps({cards}))
'''


def _rocm_smi_card(index: int) -> dict:
    return {"PCI Bus": NODE[index].upper(),
            "Temperature (Sensor edge) (C)": "N/A",
            "Temperature (Sensor junction) (C)": f"{70 + index}.0",
            "Current Socket Graphics Package Power (W)": f"{500 + index}.0",
            "sclk clock level:": "1", "sclk clock speed:": f"({2000 + index}Mhz)",
            "mclk clock level:": "3", "mclk clock speed:": "(1300Mhz)"}


def _tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, amd_smi: str | None,
           rocm_smi: bool) -> None:
    """Executables on PATH that answer like the tools, for NODE's GPUs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    node = {i: _amd_smi_gpu(i) for i in NODE}
    if amd_smi:
        (bin_dir / "amd-smi").write_text(FAKE_AMD_SMI.format(
            python=sys.executable, node=repr(node), bdfs=repr(NODE), shape=amd_smi))
    if rocm_smi:
        (bin_dir / "rocm-smi").write_text(FAKE_ROCM_SMI.format(
            python=sys.executable, cards=repr({f"card{i}": _rocm_smi_card(i) for i in NODE})))
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


@pytest.mark.parametrize("shape", ['{"gpu_data": found}', "found"])
def test_amd_smi_reads_the_ranks_gpu_by_pci_address_not_torchs_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: str) -> None:
    """ROCR_VISIBLE_DEVICES=2 (SLURM_LOCALID 2): torch calls the rank's GPU device 0; its
    PCI address is physical GPU 2's, the one at its power cap. Both JSON shapes amd-smi
    has printed (a list; {"gpu_data": [...]}) are read."""
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "2")
    _tools(tmp_path, monkeypatch, amd_smi=shape, rocm_smi=True)
    read, source = open_reader("amd", 0, NODE[2])
    assert source == "amd-smi" and read is not None
    assert read() == {"power_w": 750.0, "sm_clock_mhz": 1735.0, "memory_clock_mhz": 1300.0,
                      "temperature_c": 82.0, "reasons": ["power_cap_ppt"]}
    summary = Sampler(read, source, interval_s=0.05).start()
    time.sleep(0.3)
    got = summary.stop()
    assert got["throttle_reasons"] == {"power_cap_ppt": got["samples"]}


def test_without_amd_smi_rocm_smi_picks_the_card_by_pci_address(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "3")
    _tools(tmp_path, monkeypatch, amd_smi=None, rocm_smi=True)
    read, source = open_reader("amd", 0, NODE[3])
    assert source == "rocm-smi" and read is not None
    assert read() == {"temperature_c": 73.0, "power_w": 503.0, "sm_clock_mhz": 2003.0,
                      "memory_clock_mhz": 1300.0}  # card3's, not card0's


def test_a_gpu_neither_tool_lists_is_said_with_why_for_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tools(tmp_path, monkeypatch, amd_smi='{"gpu_data": found}', rocm_smi=True)
    read, why = open_reader("amd", 0, "0000:99:00.0")
    assert read is None and why.startswith("not available: amd-smi: CalledProcessError")
    assert ("rocm-smi: LookupError: rocm-smi lists no card at PCI address 0000:99:00.0 (it "
            "lists 0000:05:00.0, 0000:26:00.0, 0000:46:00.0, 0000:65:00.0)") in why
    no_address, why = open_reader("amd", 0, None)
    assert no_address is None and "need not be amd-smi's (ROCR_VISIBLE_DEVICES)" in why


def test_amd_smi_without_violation_status_does_not_claim_no_throttling() -> None:
    """MI250X: amd-smi prints "N/A" for the violation status (MI300 and newer only)."""
    gpu = _amd_smi_gpu(0)
    gpu["throttle"] = {key: "N/A" for key in gpu["throttle"]}
    sample = parse_amd_smi_metric(json.dumps([gpu]))
    assert "reasons" not in sample and sample["power_w"] == 540.0
    assert summarize([sample], "amd-smi")["throttle_reasons"] == "not read by amd-smi"
