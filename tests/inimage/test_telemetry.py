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
