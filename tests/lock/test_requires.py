"""The pinned wheels' own Requires-Dist against the other pins: PEP 440 local labels, markers
and extras as an installer reads them, and errors that name both pins with their lines."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from imagebuild.errors import LockError
from imagebuild.lock.requires import (
    PinnedWheel,
    check_pins_agree,
    find_disagreements,
    pin_location,
    requires_dist,
)
from imagebuild.recipe.load import load_recipe
from testbed.rocm_wheels import LINUX_X86_64, make_rocm_wheels, rocm_requires
from tests.support.indexserver import make_wheel, wheel_filename

TORCH = "2.8.0+rocm7.0.2.lw.git245bf6ed"
TORCH_OTHER_BUILD = "2.8.0+rocm7.0.2.lw.git1a2b3c4d"
TRITON = "3.4.0+rocm7.0.2.gitf9e5bf54"
TORCHVISION = "0.23.0+rocm7.0.2.git824e8c87"
TORCHAUDIO = "2.8.0+rocm7.0.2.git6e1c7fe9"
PINS = {"torch": TORCH, "triton": TRITON, "torchvision": TORCHVISION,
        "torchaudio": TORCHAUDIO}


def pinned(paths: dict[str, Path], pins: dict[str, str]) -> list[PinnedWheel]:
    return [PinnedWheel(name, pins[name], path.name, path) for name, path in paths.items()]


def wheels(tmp_path: Path, pins: dict[str, str] = PINS, **requires: list[str]
           ) -> list[PinnedWheel]:
    return pinned(make_rocm_wheels(tmp_path, pins, requires=requires), pins)


def test_metadata_is_read_from_the_wheel(tmp_path: Path) -> None:
    (torch, *_) = wheels(tmp_path)
    assert requires_dist(torch) == rocm_requires("torch", PINS)
    assert f"triton=={TRITON}; {LINUX_X86_64}" in requires_dist(torch)


def test_a_set_built_together_agrees(tmp_path: Path) -> None:
    assert find_disagreements(wheels(tmp_path), "3.12") == []


@pytest.mark.parametrize("requirement", [
    "torch==2.8.0",  # PEP 440: a public version matches every local build of it
    f"torch=={TORCH}",  # the exact build, local label included
    "torch>=2.8,<2.9",
    f"torch==2.9.0; {LINUX_X86_64} and python_version < '3.10'",  # not for Python 3.12
    "torch==2.9.0; platform_system == 'Windows'",
    "torch==2.9.0; extra == 'cuda'",  # the pins are installed without extras
    "torch @ https://download.example/torch-2.9.0-cp312-cp312-linux_x86_64.whl",
])
def test_requirements_the_pin_satisfies(tmp_path: Path, requirement: str) -> None:
    found = find_disagreements(wheels(tmp_path, torchvision=[requirement, "numpy"]), "3.12")
    assert found == []


@pytest.mark.parametrize("requirement", [
    f"torch=={TORCH_OTHER_BUILD}",  # another build of the same version
    "torch==2.8.0+rocm7.0.2.git245bf6ed",  # torch.__version__'s spelling: not the file's
    "torch==2.9.0",
    f"torch==2.9.0; {LINUX_X86_64}",
    "torch<2.8",
])
def test_requirements_the_pin_fails(tmp_path: Path, requirement: str) -> None:
    (found,) = find_disagreements(wheels(tmp_path, torchvision=[requirement]), "3.12")
    assert found.wheel.name == "torchvision" and found.required.name == "torch"
    assert found.requirement == requirement


def test_markers_are_judged_for_the_images_python(tmp_path: Path) -> None:
    old_python_only = [f"torch=={TORCH_OTHER_BUILD}; python_version < '3.12'"]
    assert find_disagreements(wheels(tmp_path, torchaudio=old_python_only), "3.12") == []
    assert len(find_disagreements(wheels(tmp_path, torchaudio=old_python_only), "3.11")) == 1


def test_names_are_compared_canonically(tmp_path: Path) -> None:
    pins = {"torch": "2.8.0+rocm6.4.4.gitc1404424",
            "pytorch-triton-rocm": "3.4.0+rocm6.4.4.gitf9e5bf54"}
    assert find_disagreements(wheels(tmp_path, pins), "3.12") == []
    wrong = ["Pytorch_Triton_ROCm==3.4.0+rocm6.4.4"]  # the build hash left out
    (found,) = find_disagreements(wheels(tmp_path, pins, torch=wrong), "3.12")
    assert found.required.name == "pytorch-triton-rocm"


def test_requirements_on_unpinned_projects_are_left_to_the_resolver(tmp_path: Path) -> None:
    pins = {"torch": TORCH}
    assert find_disagreements(wheels(tmp_path, pins, torch=["numpy<0.1"]), "3.12") == []


def test_every_disagreement_is_found(tmp_path: Path) -> None:
    found = find_disagreements(wheels(tmp_path, torchvision=["torch==2.9.0"],
                                      torchaudio=["torch==2.9.0"],
                                      torch=["triton==3.5.0"]), "3.12")
    assert sorted((d.wheel.name, d.required.name) for d in found) == [
        ("torch", "triton"), ("torchaudio", "torch"), ("torchvision", "torch")]


def test_a_damaged_wheel_is_a_lock_error(tmp_path: Path) -> None:
    path = tmp_path / wheel_filename("torch", TORCH)
    path.write_bytes(b"<html>502 Bad Gateway</html>")
    with pytest.raises(LockError, match="not a readable wheel"):
        requires_dist(PinnedWheel("torch", TORCH, path.name, path))


def test_a_wheel_without_metadata_is_a_lock_error(tmp_path: Path) -> None:
    path = tmp_path / wheel_filename("torch", TORCH)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch/__init__.py", "")
    with pytest.raises(LockError, match=r"no \.dist-info/METADATA"):
        requires_dist(PinnedWheel("torch", TORCH, path.name, path))


def test_an_invalid_requirement_names_the_wheel(tmp_path: Path) -> None:
    path = make_wheel(tmp_path, "torchvision", TORCHVISION, requires=["torch >=2.8,<"])
    other = make_wheel(tmp_path, "torch", TORCH)
    with pytest.raises(LockError, match=r"torchvision-0\.23\.0.*invalid Requires-Dist"):
        find_disagreements([PinnedWheel("torchvision", TORCHVISION, path.name, path),
                            PinnedWheel("torch", TORCH, other.name, other)], "3.12")


PARENT = f"""\
version: 1
rocm: 7.0.2
base_image: rocm/dev-ubuntu-24.04:7.0.2-complete
wheels:
  packages:
    torch: {TORCH}
    triton: {TRITON}
gpu_targets: [gfx942]
"""
CHILD = f"""\
version: 1
extends: _parent
wheels:
  packages:
    torchvision: {TORCHVISION}
"""


def test_the_error_names_both_pins_where_they_are_set(tmp_path: Path) -> None:
    (tmp_path / "_parent.yaml").write_text(PARENT)
    (tmp_path / "child.yaml").write_text(CHILD)
    recipe = load_recipe(str(tmp_path / "child.yaml"))
    pins = dict(recipe.wheels.pinned)
    assert pin_location(recipe, "torchvision").endswith("child.yaml:5: wheels.packages.torchvision")
    assert pin_location(recipe, "torch").endswith("_parent.yaml:6: wheels.packages.torch")
    built_for_other = make_rocm_wheels(tmp_path / "index", pins, requires={
        "torchvision": rocm_requires("torchvision", {"torch": TORCH_OTHER_BUILD})})
    with pytest.raises(LockError) as caught:
        check_pins_agree(recipe, pinned(built_for_other, pins))
    error = caught.value
    assert error.where.endswith("child.yaml: wheels.packages")
    message = str(error)
    assert f"torchvision {TORCHVISION} (" in message
    assert f"requires `torch=={TORCH_OTHER_BUILD}`" in message
    assert f"METADATA of {wheel_filename('torchvision', TORCHVISION)}" in message
    assert f"but torch is pinned to {TORCH} (" in message
    assert "_parent.yaml:6: wheels.packages.torch)" in message
    assert "\nhint: pin builds made for each other" in message


def test_a_set_that_agrees_passes_the_check(tmp_path: Path) -> None:
    (tmp_path / "_parent.yaml").write_text(PARENT)
    (tmp_path / "child.yaml").write_text(CHILD)
    recipe = load_recipe(str(tmp_path / "child.yaml"))
    pins = dict(recipe.wheels.pinned)
    check_pins_agree(recipe, pinned(make_rocm_wheels(tmp_path / "index", pins), pins))
