"""What the image needs, wherever it is described: a recipe (before it is built), an
image (its manifest, read through the container engine), a squashed image (.sqsh or
.sif: the manifest read out of its squashfs), or a manifest file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from imagebuild.components.network_plugin import component as network_plugin
from imagebuild.components.network_plugin.libfabric import abi_name, abi_of
from imagebuild.components.rccl_tuner import component as rccl_tuner
from imagebuild.convert.read_file import read_from_image_file
from imagebuild.errors import ValidateError
from imagebuild.inimage.doctor.needs import (
    ImageNeeds,
    needs_beside,
    needs_from_manifest,
    release_of,
    with_device_code,
)
from imagebuild.inimage.image_manifest import load_manifest
from imagebuild.recipe.model import Recipe
from imagebuild.render.layout import DEVICE_CODE_REPORT, IMAGE_MANIFEST, VENV


def needs_for_recipe(recipe: Recipe) -> ImageNeeds:
    """Before a build: the recipe's ROCm and targets; the plugin needs the newest symbol
    version of the libfabric it is built against (fi_getinfo's, the one that moves). The
    plugin stage builds aws-ofi-nccl with --disable-platform-aws, which leaves its tuner out
    (src/Makefile.am), and ROCm's aws-ofi-rccl has none: the recipe's plugin exports none."""
    tuner = rccl_tuner.section(recipe)
    needs = ImageNeeds(
        name=recipe.name, rocm=recipe.rocm, gpu_targets=tuple(recipe.gpu_targets),
        plugin=False, plugin_library=None, fabric_needs=(), venv=VENV,
        # the library the tuner stage installs (its plan's library)
        rccl_tuner_library=f"{rccl_tuner.PREFIX}/lib/librccl-tuner.so" if tuner else None)
    plugin = network_plugin.section(recipe)
    if plugin is None:
        return needs
    return replace(
        needs, plugin=True,
        plugin_library=f"{network_plugin.plugin_prefix(plugin.kind)}/lib/librccl-net.so",
        fabric_needs=(abi_name(abi_of(network_plugin.built_against(plugin, recipe))),),
        plugin_kind=plugin.kind, plugin_version=release_of(plugin.source.ref), plugin_tuner=())

def needs_from_file(path: Path) -> ImageNeeds:
    manifest, why = load_manifest(str(path))
    if manifest is None:
        raise ValidateError(f"doctor: {why}", hint="name a recipe or an image, or run inside "
                            "an image built by imagebuild")
    return needs_beside(manifest, path)


#: Squashed image files (imagebuild squash, apptainer build), read without an engine.
IMAGE_FILE_SUFFIXES = (".sif", ".sqsh", ".squashfs")


def is_image_file(target: str) -> bool:
    return target.endswith(IMAGE_FILE_SUFFIXES)


def needs_for_image_file(path: Path) -> ImageNeeds:
    """The manifest inside a .sqsh or .sif (unsquashfs, no container engine)."""
    text = read_from_image_file(path, IMAGE_MANIFEST)
    if text is None:
        raise ValidateError(f"doctor: {path} has no {IMAGE_MANIFEST}",
                            hint="doctor reads what an image needs from the manifest "
                            "imagebuild writes; squash an image built by imagebuild, or "
                            "name its recipe")
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise ValidateError(f"doctor: {path}:{IMAGE_MANIFEST} is not JSON ({exc})") from exc
    device_code = read_from_image_file(path, DEVICE_CODE_REPORT)
    try:
        report = json.loads(device_code) if device_code else None
    except ValueError:
        report = None  # a broken report is the build's problem; the manifest still counts
    return with_device_code(needs_from_manifest(manifest, path.name), report)


def needs_for_image(ref: str, engine: Any) -> ImageNeeds:
    """The manifest of image ``ref``, read by running ``cat`` in a throwaway container."""
    result = engine.run(ref, ["cat", IMAGE_MANIFEST])
    if result.exit_code != 0:
        raise ValidateError(f"doctor: image {ref} has no {IMAGE_MANIFEST} "
                            f"({result.output.strip()[-200:]})",
                            hint="doctor reads what an image needs from the manifest "
                            "imagebuild writes; name the recipe instead")
    try:
        manifest = json.loads(result.output)
    except ValueError as exc:
        raise ValidateError(f"doctor: {ref}:{IMAGE_MANIFEST} is not JSON ({exc})") from exc
    return needs_from_manifest(manifest, ref)
