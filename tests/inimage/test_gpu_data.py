"""The GPU table: matching devices to peaks, thresholds and their overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.inimage.gpu_data import (
    UsageError,
    device_peak,
    effective_thresholds,
    load_gpu_data,
    load_threshold_file,
    match_gpu,
)

DATA = load_gpu_data()


@pytest.mark.parametrize(("name", "arch", "memory", "model", "peak"), [
    ("AMD Instinct MI250X", "gfx90a", 64, "MI250X", 191.5),
    ("AMD Instinct MI250X / MI250", "gfx90a", 64, "MI250X", 191.5),
    ("AMD Instinct MI210", "gfx90a", 64, "MI210", 181.0),
    ("AMD Instinct MI300A", "gfx942", 128, "MI300A", 980.6),
    ("AMD Instinct MI300X", "gfx942", 192, "MI300X", 1307.4),
    ("AMD Instinct MI300X VF", "gfx942", 192, "MI300X", 1307.4),
    ("AMD Instinct MI325X", "gfx942", 256, "MI325X", 1307.4),
    ("AMD Instinct MI355X", "gfx950", 288, "MI355X", 2500.0),
    ("NVIDIA H100 80GB HBM3", "sm_90", 80, "H100", 989.0),
    ("NVIDIA H100 PCIe", "sm_90", 80, "H100 PCIe", 756.0),
    ("NVIDIA H200", "sm_90", 141, "H200", 989.0),
    ("NVIDIA GH200 480GB", "sm_90", 96, "GH200", 989.0),
    ("NVIDIA A100-SXM4-80GB", "sm_80", 80, "A100", 312.0),
])
def test_devices_match_by_name(name: str, arch: str, memory: float, model: str,
                               peak: float) -> None:
    match = match_gpu(DATA, name, arch, memory)
    assert match.model is not None and match.model.model == model
    assert match.model.peak_bf16_dense_tflops == peak
    assert "device name" in match.how


@pytest.mark.parametrize(("arch", "memory", "model"), [
    ("gfx90a", 64, "MI250X"), ("gfx942", 128, "MI300A"), ("gfx942", 192, "MI300X"),
    ("gfx942", 256, "MI325X"), ("gfx950", 288, "MI355X"),
])
def test_generic_names_fall_back_to_architecture(arch: str, memory: float, model: str) -> None:
    # Containers without amdgpu.ids report "AMD Radeon Graphics" or an empty name.
    match = match_gpu(DATA, "AMD Radeon Graphics", arch, memory)
    assert match.model is not None and match.model.model == model
    assert arch in match.how


def test_unknown_device_has_no_peak() -> None:
    match = match_gpu(DATA, "NVIDIA GeForce RTX 4090", "sm_89", 24)
    assert match.model is None and "sm_89" in match.how


def test_thresholds_merge_default_model_and_user_overrides() -> None:
    default = effective_thresholds(DATA, None)
    h100 = effective_thresholds(DATA, "H100")
    assert default["gemm_min_fraction"] == DATA["thresholds"]["default"]["gemm_min_fraction"]
    assert h100["gemm_min_fraction"] == DATA["thresholds"]["H100"]["gemm_min_fraction"]
    assert h100["attention_max_bwd_fwd_ratio"] == default["attention_max_bwd_fwd_ratio"]
    user = {"train_min_mfu": 0.5, "H100": {"gemm_min_fraction": 0.9}, "MI300X": {"train_min_mfu": 0.1}}
    merged = effective_thresholds(DATA, "H100", user)
    assert merged["train_min_mfu"] == 0.5 and merged["gemm_min_fraction"] == 0.9
    assert effective_thresholds(DATA, "MI300X", user)["train_min_mfu"] == 0.1


def test_every_model_threshold_names_a_known_threshold_and_model() -> None:
    names = set(DATA["thresholds"]["default"])
    models = {g["model"] for g in DATA["gpus"]}
    for model, values in DATA["thresholds"].items():
        assert model == "default" or model in models, model
        assert set(values) <= names, (model, set(values) - names)


def test_threshold_file_errors_name_the_key(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"MI300X": {"gemm_min_fraction": 0.5}}))
    assert load_threshold_file(good, DATA) == {"MI300X": {"gemm_min_fraction": 0.5}}
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"gemm_min_fracion": 0.5}))
    with pytest.raises(UsageError, match="did you mean 'gemm_min_fraction'"):
        load_threshold_file(typo, DATA)
    negative = tmp_path / "negative.json"
    negative.write_text(json.dumps({"H100": {"train_min_mfu": -1}}))
    with pytest.raises(UsageError, match="H100.train_min_mfu"):
        load_threshold_file(negative, DATA)
    yaml_file = tmp_path / "t.yaml"
    yaml_file.write_text("train_min_mfu: 0.3\n")
    with pytest.raises(UsageError, match="reads JSON"):
        load_threshold_file(yaml_file, DATA)


@pytest.mark.parametrize(("name", "arch", "memory", "cus", "mode", "peak"), [
    # MI300X in CPX mode: each of the 8 XCDs (38 of 304 CUs) is a device of its own
    ("AMD Instinct MI300X", "gfx942", 24, 38, "CPX", round(1307.4 / 8, 1)),
    # MI300A in TPX mode: 3 partitions of 2 XCDs, 76 of 228 CUs
    ("AMD Instinct MI300A", "gfx942", 40, 76, "TPX", round(980.6 / 3, 1)),
    # A MIG slice of an H100: 16 of its 132 SMs
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", "sm_90", 10, 16, "MIG slice",
     round(989.0 * 16 / 132, 1)),
])
def test_a_partition_gets_its_share_of_the_device_peak(name: str, arch: str, memory: float,
                                                        cus: int, mode: str,
                                                        peak: float) -> None:
    match = match_gpu(DATA, name, arch, memory)
    assert match.model is not None
    result = device_peak(match.model, cus)
    assert result.tflops == peak
    assert result.partition is not None and result.partition["mode"] == mode
    assert f"{cus} of {match.model.compute_units} compute units" in result.source


@pytest.mark.parametrize("cus", [304, None, 0])
def test_the_whole_device_or_an_unknown_cu_count_keeps_the_device_peak(cus: int | None) -> None:
    model = match_gpu(DATA, "AMD Instinct MI300X", "gfx942", 192).model
    assert model is not None
    result = device_peak(model, cus)
    assert (result.tflops, result.partition) == (1307.4, None)


def test_every_gpu_has_its_compute_units_and_last_level_cache_with_a_public_source() -> None:
    for entry in DATA["gpus"]:
        assert entry["compute_units"] > 0 and entry["llc_mib"] > 0, entry["model"]
        assert "https://" in entry["cache_source"], entry["model"]
    mi300x = match_gpu(DATA, "AMD Instinct MI300X", "gfx942", 192).model
    assert mi300x is not None and mi300x.llc_mib == 256  # its Infinity Cache


def test_no_peak_source_cites_a_document_outside_the_repository() -> None:
    """Sources are copied into every report: they name public pages, not design notes."""
    for entry in DATA["gpus"]:
        assert "REFERENCE.md" not in entry["source"] and "UNCONFIRMED" not in entry["source"]
    mi300a = match_gpu(DATA, "AMD Instinct MI300A", "gfx942", 128).model
    assert mi300a is not None and "https://www.amd.com/" in mi300a.source
