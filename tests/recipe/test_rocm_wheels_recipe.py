"""Recipes whose ROCm comes from wheels (rocm_from: wheels): the 7.14 and 10.x lines read
their multi-arch index with one device extra per target, the legacy per-family index
follows from gpu_targets, targets TheRock does not release-test are refused unless the
recipe accepts them, and what cannot work with the SDK wheels is refused by key."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.errors import RecipeError
from imagebuild.recipe.gpu_family import FamilyError, device_extras, family_of
from imagebuild.recipe.load import load_recipe
from imagebuild.recipe.model import ROCM_WHEELS_INDEX

WHEELS = """\
version: 1
rocm: 10.0.0
rocm_from: wheels
base_image: ubuntu:24.04
wheels:
  packages:
    torch: 2.9.1+rocm10.0.0
gpu_targets: [{targets}]
{extra}"""


def recipe(tmp_path: Path, targets: str = "gfx942", extra: str = "") -> Path:
    path = tmp_path / "therock.yaml"
    path.write_text(WHEELS.format(targets=targets, extra=extra))
    return path


def problems(path: Path) -> str:
    with pytest.raises(RecipeError) as caught:
        load_recipe(str(path))
    return str(caught.value)


@pytest.mark.parametrize(("targets", "family"), [
    (["gfx942"], "gfx94X-dcgpu"),
    (["gfx942:xnack-"], "gfx94X-dcgpu"),
    (["gfx950"], "gfx950-dcgpu"),
    (["gfx1100", "gfx1101"], "gfx110X-all"),
])
def test_the_family_follows_from_the_targets(targets: list[str], family: str) -> None:
    assert family_of(targets) == family


def test_mi250x_has_only_the_untested_nightly_family() -> None:
    assert family_of(["gfx90a"]) == "gfx90X-dcgpu"


def test_each_target_selects_one_device_extra() -> None:
    assert device_extras(["gfx950", "gfx942:xnack-", "gfx942"]) == ("device-gfx942",
                                                                    "device-gfx950")
    with pytest.raises(FamilyError, match="gfx803: no device extra"):
        device_extras(["gfx803"])


def test_targets_of_two_families_are_refused() -> None:
    with pytest.raises(FamilyError, match="gfx94X-dcgpu: gfx942; gfx950-dcgpu: gfx950"):
        family_of(["gfx942", "gfx950"])


@pytest.mark.parametrize(("rocm", "index"), [
    ("10.0.0", "https://stable.repo.amd.com/rocm/whl-next/"),
    ("10.1.0", "https://stable.repo.amd.com/rocm/whl-next/"),
    ("7.14.1", "https://repo.amd.com/rocm/whl-multi-arch/"),
])
def test_the_therock_lines_read_their_multi_arch_index(tmp_path: Path, rocm: str,
                                                       index: str) -> None:
    path = recipe(tmp_path, "gfx942, gfx950")
    path.write_text(path.read_text().replace("rocm: 10.0.0", f"rocm: {rocm}"))
    loaded = load_recipe(str(path))
    assert loaded.multi_arch and loaded.gpu_family is None
    assert loaded.wheels.index_url == index
    assert loaded.device_extras == ("device-gfx942", "device-gfx950")
    inputs = loaded.lock_inputs()
    assert inputs["device_extras"] == ["device-gfx942", "device-gfx950"]
    assert "gpu_family" not in inputs


def test_the_device_extras_are_lock_inputs(tmp_path: Path) -> None:
    one = load_recipe(str(recipe(tmp_path, "gfx942")))
    two = load_recipe(str(recipe(tmp_path, "gfx942, gfx950")))
    assert one.lock_input_hash() != two.lock_input_hash()


def test_older_lines_read_the_legacy_family_index(tmp_path: Path) -> None:
    path = recipe(tmp_path)
    path.write_text(path.read_text().replace("rocm: 10.0.0", "rocm: 7.13.0"))
    loaded = load_recipe(str(path))
    assert loaded.rocm_wheels and loaded.gpu_family == "gfx94X-dcgpu"
    assert loaded.wheel_layout == "per-family" and not loaded.device_extras
    assert loaded.wheels.index_url == ROCM_WHEELS_INDEX.format(family="gfx94X-dcgpu")
    assert loaded.lock_inputs()["gpu_family"] == "gfx94X-dcgpu"


def test_a_mirror_index_names_the_family_as_a_placeholder(tmp_path: Path) -> None:
    path = recipe(tmp_path, "gfx950", extra="")
    path.write_text(path.read_text().replace(
        "wheels:\n", "wheels:\n  index_url: https://mirror.example/rocm/{family}/\n"))
    assert load_recipe(str(path)).wheels.index_url == "https://mirror.example/rocm/gfx950-dcgpu/"


def test_family_placeholder_needs_wheels(tmp_path: Path) -> None:
    path = recipe(tmp_path)
    path.write_text(path.read_text().replace("rocm_from: wheels\n", "").replace(
        "wheels:\n", "wheels:\n  index_url: https://mirror.example/{family}/\n"))
    assert "{family} is only known when rocm_from is wheels" in problems(path)


def test_base_image_recipes_keep_their_lock_inputs(tmp_path: Path) -> None:
    path = recipe(tmp_path)
    path.write_text(path.read_text().replace("rocm_from: wheels\n", ""))
    assert "rocm_from" not in load_recipe(str(path)).lock_inputs()


@pytest.mark.parametrize(("extra", "key", "says"), [
    (("hipblaslt:\n  enabled: true\n  repository: https://github.com/ROCm/rocm-libraries.git\n"
     "  ref: rocm-7.2.4\n"), "hipblaslt.enabled", "TunableOp"),
    (("network_plugin:\n  enabled: true\n  repository: https://github.com/aws/aws-ofi-nccl.git\n"
     "  ref: v1.18.0\n  libfabric: {version: 1.22.0, url: https://example.org/l.tar.bz2}\n"),
     "network_plugin.enabled", "devel"),
])
def test_source_builds_that_would_not_serve_the_wheels_are_refused(
        tmp_path: Path, extra: str, key: str, says: str) -> None:
    message = problems(recipe(tmp_path, extra=extra + "build_packages: [gcc]\n"))
    assert key in message and says in message


@pytest.mark.parametrize("index", ["", "wheels:\n  index_url: https://m.example/{family}/\n"])
def test_mi250x_targets_are_refused_by_key(tmp_path: Path, index: str) -> None:
    path = recipe(tmp_path, "gfx90a, gfx942")
    path.write_text(path.read_text().replace("wheels:\n", index or "wheels:\n"))
    message = problems(path)
    assert "gpu_targets" in message and "rocm-7.2.4" in message
    assert "ROCm/pytorch#3518" in message and "accept_untested_targets" in message


def test_an_accepted_untested_target_gets_its_device_extra(tmp_path: Path) -> None:
    loaded = load_recipe(str(recipe(tmp_path, "gfx90a, gfx942",
                                    extra="accept_untested_targets: [gfx90a]\n")))
    assert loaded.device_extras == ("device-gfx90a", "device-gfx942")
    assert loaded.accept_untested_targets == ("gfx90a",)


def test_accepting_a_target_the_recipe_does_not_build_is_refused(tmp_path: Path) -> None:
    message = problems(recipe(tmp_path, "gfx942", extra="accept_untested_targets: [gfx90a]\n"))
    assert "accept_untested_targets: gfx90a is not in gpu_targets" in message


def test_the_selector_is_not_pinned_by_hand(tmp_path: Path) -> None:
    path = recipe(tmp_path)
    path.write_text(path.read_text().replace("    torch:", "    rocm: 10.0.0\n    torch:"))
    assert "wheels.packages.rocm" in problems(path)
