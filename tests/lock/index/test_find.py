"""Pinning the exact file for an exact version, and naming the closest files on a miss."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagebuild.errors import WheelIndexError
from imagebuild.lock.index import WheelIndex
from tests.lock.index.conftest import FAST, TORCH, TORCH_CP312, TORCH_OTHER_BUILD
from tests.support.indexserver import IndexServer, make_wheel


@pytest.fixture
def index(rocm_index: IndexServer) -> WheelIndex:
    return WheelIndex(rocm_index.url, **FAST)


@pytest.mark.parametrize(("version", "python", "expected"), [
    (TORCH, "3.12", TORCH_CP312),
    (TORCH_OTHER_BUILD, "3.12", f"torch-{TORCH_OTHER_BUILD}-cp312-cp312-linux_x86_64.whl"),
    (TORCH, "3.10", f"torch-{TORCH}-cp310-cp310-linux_x86_64.whl"),
])
def test_exact_pin_picks_the_right_build(index: WheelIndex, version: str, python: str,
                                         expected: str) -> None:
    found = index.find("torch", version, python=python)
    assert found.filename == expected
    assert str(found.version) == version


def test_names_are_compared_canonically(index: WheelIndex) -> None:
    assert index.find("Torch", TORCH).filename == TORCH_CP312
    assert index.find("TorchVision", "0.24.0+rocm7.0.2.gitb919bd0c").name == "torchvision"


def test_missing_build_names_the_closest_files(index: WheelIndex,
                                               rocm_index: IndexServer) -> None:
    wanted = "2.8.0+rocm7.0.2.lw.gitdeadbeef"
    with pytest.raises(WheelIndexError) as caught:
        index.find("torch", wanted)
    message = str(caught.value)
    prefix = f"torch=={wanted} (cp312, linux_x86_64) is not in {rocm_index.url}: closest: "
    assert message.startswith(prefix), message
    closest = message.removeprefix(prefix).split(", ")
    # Same version, other build hash or other Python tag, before another torch version.
    assert set(closest[:3]) == {TORCH_CP312, f"torch-{TORCH}-cp310-cp310-linux_x86_64.whl",
                                f"torch-{TORCH_OTHER_BUILD}-cp312-cp312-linux_x86_64.whl"}
    assert closest[3] == "torch-2.7.1+rocm7.0.2.lw.git2a215e4a-cp312-cp312-linux_x86_64.whl"
    assert "\n" not in message


def test_missing_python_tag_names_the_other_tags(index: WheelIndex) -> None:
    with pytest.raises(WheelIndexError, match=r"\(cp311, linux_x86_64\) is not in ") as caught:
        index.find("torch", TORCH, python="3.11")
    closest = str(caught.value).split("closest: ")[1].split(", ")
    assert set(closest[:2]) == {TORCH_CP312, f"torch-{TORCH}-cp310-cp310-linux_x86_64.whl"}


def test_version_without_local_part_is_not_a_pin(index: WheelIndex) -> None:
    with pytest.raises(WheelIndexError, match=r"torch==2\.8\.0 \(cp312.*closest: torch-2\.8\.0\+"):
        index.find("torch", "2.8.0")


def test_unknown_package_suggests_a_name(index: WheelIndex) -> None:
    with pytest.raises(WheelIndexError,
                       match=r"torhc==2\.8\.0 .*: no torhc wheels there; did you mean torch\?"
                             r" projects: apex, torch, torchaudio, torchvision, triton$"):
        index.find("torhc", "2.8.0")


def test_invalid_version_is_a_clear_error(index: WheelIndex) -> None:
    with pytest.raises(WheelIndexError, match=r"torch==2\.8\.0\+ not a valid version"):
        index.find("torch", "2.8.0+ not a valid version")


def test_empty_listing(index_server: IndexServer) -> None:
    with pytest.raises(WheelIndexError, match="the listing holds no wheels"):
        WheelIndex(index_server.url, **FAST).find("torch", TORCH)


def test_compatible_tags_and_preference(tmp_path: Path) -> None:
    make_wheel(tmp_path, "pure", "1.0", python_tag="py3", platform="any")
    make_wheel(tmp_path, "stable", "1.0", python_tag="cp39", abi_tag="abi3",
               platform="manylinux_2_28_x86_64")
    make_wheel(tmp_path, "arm", "1.0", platform="manylinux_2_28_aarch64")
    make_wheel(tmp_path, "both", "1.0", python_tag="py3", platform="any")
    make_wheel(tmp_path, "both", "1.0")  # cp312-cp312-linux_x86_64: more specific, wins
    index = WheelIndex(tmp_path)

    assert index.find("pure", "1.0").filename == "pure-1.0-py3-none-any.whl"
    assert index.find("stable", "1.0").filename.endswith("cp39-abi3-manylinux_2_28_x86_64.whl")
    assert index.find("both", "1.0").filename == "both-1.0-cp312-cp312-linux_x86_64.whl"
    assert index.find("arm", "1.0", platform="linux_aarch64").name == "arm"
    with pytest.raises(WheelIndexError, match="closest: arm-1.0-cp312-cp312-manylinux_2_28_aarch64"):
        index.find("arm", "1.0")
    with pytest.raises(WheelIndexError, match=r"\(cp312, manylinux_2_17_x86_64\) is not in"):
        index.find("stable", "1.0", platform="manylinux_2_17_x86_64")


@pytest.mark.parametrize(("python", "platform", "message"), [
    ("three", "linux_x86_64", "python version 'three': expected MAJOR.MINOR"),
    ("3.12", "win_amd64", "platform 'win_amd64': expected linux_ARCH or manylinux_X_Y_ARCH"),
])
def test_bad_target(index: WheelIndex, python: str, platform: str, message: str) -> None:
    with pytest.raises(WheelIndexError, match=message):
        index.find("torch", TORCH, python=python, platform=platform)
