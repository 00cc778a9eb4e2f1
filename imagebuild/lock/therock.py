"""What a resolution of ROCm from TheRock's wheels must hold: the libraries of the recipe's
GPU family (per-family index), or the device packs of its targets and no others (multi-arch
index, where torch's device extras select them)."""

from __future__ import annotations

from typing import Any

from packaging.utils import canonicalize_name

from imagebuild.errors import LockError
from imagebuild.lock.requires import PinnedWheel, provides_extra
from imagebuild.recipe.model import ROCM_SELECTOR, Recipe

#: TheRock's per-family libraries wheel: rocm-sdk-libraries-<family>.
LIBRARIES_PREFIX = "rocm-sdk-libraries-"
#: A multi-arch index's device packs: the SDK's (rocm-sdk-device-<target>) and a
#: framework's (amd-torch-device-<target>, amd-torchvision-device-<target>).
SDK_DEVICE_PREFIX = "rocm-sdk-device-"
DEVICE_INFIX = "-device-"


def check_family(recipe: Recipe, packages: list[dict[str, Any]]) -> None:
    """The resolved ROCm libraries are the family of the recipe's targets, and only it: a
    selector that ignored ROCM_SDK_TARGET_FAMILY (or an index of another family) would
    otherwise give an image without device code for its GPUs."""
    wanted = canonicalize_name(f"{LIBRARIES_PREFIX}{recipe.gpu_family}")
    found = sorted(p["name"] for p in packages if p["name"].startswith(LIBRARIES_PREFIX))
    names = {p["name"] for p in packages}
    if found != [wanted] or ROCM_SELECTOR not in names:
        raise LockError(
            f"{recipe.name}: gpu_targets {', '.join(recipe.gpu_targets)} need {wanted} from "
            f"the {recipe.gpu_family} index, the resolution gave "
            f"{', '.join(found) or 'no ROCm libraries'}"
            + ("" if ROCM_SELECTOR in names else f" and no {ROCM_SELECTOR} selector"),
            hint=f"check wheels.index_url ({recipe.wheels.index_url}) serves that family")


def device_extras_of(recipe: Recipe, wheels: list[PinnedWheel]
                     ) -> dict[str, tuple[str, ...]]:
    """Pinned project -> the recipe's device extras, for each pinned wheel that provides
    device extras (torch, torchvision); torch must provide one for every target."""
    extras: dict[str, tuple[str, ...]] = {}
    for wheel in wheels:
        offered = sorted(e for e in provides_extra(wheel) if e.startswith("device-"))
        if not offered:
            if wheel.name == "torch":
                raise LockError(
                    f"{recipe.name}: {wheel.filename} provides no device extras, so "
                    f"{recipe.wheels.index_url} is not a multi-arch index",
                    hint="for a legacy per-family index write {family} in wheels.index_url, "
                         "e.g. https://repo.amd.com/rocm/whl/{family}/")
            continue
        missing = [e for e in recipe.device_extras if e not in offered]
        if missing:
            raise LockError(
                f"{recipe.name}: {wheel.filename} provides no {', '.join(missing)} extra "
                f"(it provides {', '.join(offered)})",
                hint="this release has no device code for that target: remove it from "
                     "gpu_targets, or pin a release that builds it")
        extras[wheel.name] = recipe.device_extras
    return extras


def check_devices(recipe: Recipe, packages: list[dict[str, Any]]) -> None:
    """A multi-arch resolution holds the SDK's device pack of every target, and device packs
    of the recipe's targets only: another target's would be code the GPUs never run."""
    wanted = {extra.removeprefix("device-") for extra in recipe.device_extras}
    names = {p["name"] for p in packages}
    devices = {name: name.rsplit(DEVICE_INFIX, 1)[1] for name in names
               if DEVICE_INFIX in name}
    missing = sorted(f"{SDK_DEVICE_PREFIX}{t}" for t in wanted
                     if f"{SDK_DEVICE_PREFIX}{t}" not in names)
    others = sorted(name for name, target in devices.items() if target not in wanted)
    family = sorted(name for name in names if name.startswith(LIBRARIES_PREFIX))
    if missing or others or family or ROCM_SELECTOR not in names:
        found = [f"missing {', '.join(missing)}" if missing else "",
                 f"device code for other targets: {', '.join(others)}" if others else "",
                 f"per-family libraries {', '.join(family)}" if family else "",
                 "" if ROCM_SELECTOR in names else f"no {ROCM_SELECTOR} selector"]
        raise LockError(
            f"{recipe.name}: gpu_targets {', '.join(recipe.gpu_targets)} need the device "
            f"packs {', '.join(sorted(f'{SDK_DEVICE_PREFIX}{t}' for t in wanted))} from the "
            f"multi-arch index; the resolution gave {'; '.join(f for f in found if f)}",
            hint=f"check wheels.index_url ({recipe.wheels.index_url}) is a multi-arch index")
