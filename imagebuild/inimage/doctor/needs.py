"""What an image needs from the node, from its manifest (/opt/imagebuild/manifest.json,
schema: imagebuild/data/image-manifest.schema.json): its ROCm release, the GPU targets
it is built for, its network plugin and the libfabric symbol versions that plugin
needs (recorded by the build's plugin check), and its Python environment; and, where
the final stage wrote one, its device-code report (/opt/imagebuild/device-code.json,
imagebuild/render/scripts/device-code-check.py): the targets whose code the image kept
and, per kernel library torch loads, its kernel files per target."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..image_manifest import section

#: Beside the manifest: what the final stage's device-code diet kept.
DEVICE_CODE_FILE = "device-code.json"


@dataclass(frozen=True)
class KernelLibrary:
    """A library torch loads that finds its kernels by architecture in a directory."""

    library: str  # /opt/rocm/lib/librocblas.so.4
    stem: str  # librocblas
    kernels: str  # its kernel directory
    files: tuple[tuple[str, int], ...]  # (target, kernel files for it)


@dataclass(frozen=True)
class ImageNeeds:
    name: str  # recipe name, or what the manifest came from
    rocm: str | None  # "7.2.4"; None for a CPU-only image
    gpu_targets: tuple[str, ...]
    plugin: bool
    plugin_library: str | None
    #: FABRIC_x.y tags the plugin needs from libfabric (empty: unknown).
    fabric_needs: tuple[str, ...]
    venv: str | None
    #: From the device-code report, when the image has one: the targets whose code it kept
    #: (None: no report), and its kernel libraries.
    device_code_targets: tuple[str, ...] | None = None
    kernel_libraries: tuple[KernelLibrary, ...] = ()
    #: RCCL's release where the manifest records one (an RCCL pinned apart from ROCm);
    #: None: the ROCm release's own (rccl_p2p.RCCL_OF_ROCM).
    rccl_version: str | None = None
    #: The network plugin's project (aws-ofi-nccl, aws-ofi-rccl) and release ("1.18.0";
    #: None where the build followed a branch or commit).
    plugin_kind: str | None = None
    plugin_version: str | None = None
    #: The ncclTunerPlugin_v<N> symbols the plugin exports; None: not known here.
    plugin_tuner: tuple[str, ...] | None = None
    #: imagebuild's RCCL tuner plugin (None: the image has none) and its configuration.
    rccl_tuner_library: str | None = None
    rccl_tuner_config: str | None = None

    @property
    def rocm_line(self) -> str | None:
        """"7.2.4" -> "7.2": AMD's tables speak of release lines (7.2.x)."""
        return ".".join(self.rocm.split(".")[:2]) if self.rocm else None


#: A release tag: v1.18.0, 1.21.1, v1.13.2-aws (aws-ofi-nccl's tags).
RELEASE_TAG = re.compile(r"^v?(\d+\.\d+(?:\.\d+)?)(?:-aws)?$")


def release_of(ref: Any) -> str | None:
    """"v1.18.0" -> "1.18.0"; None for a branch or a commit."""
    match = RELEASE_TAG.match(str(ref or ""))
    return match.group(1) if match else None


def needs_from_manifest(manifest: dict[str, Any], name: str | None = None) -> ImageNeeds:
    plugin = section(manifest, "network_plugin")
    elf: dict[str, Any] = plugin["elf"] if isinstance(plugin.get("elf"), dict) else {}
    tuner = section(manifest, "rccl_tuner")
    targets = manifest.get("gpu_targets") or []
    return ImageNeeds(
        name=name or str(manifest.get("recipe") or "image"),
        rocm=manifest.get("rocm_version") or None,
        gpu_targets=tuple(str(t) for t in targets),
        plugin=bool(plugin.get("enabled")),
        plugin_library=plugin.get("library") or elf.get("library") or None,
        fabric_needs=tuple(elf.get("libfabric_versions_needed") or plugin.get(
            "libfabric_versions_needed") or ()),
        venv=manifest.get("venv") or None,
        rccl_version=section(manifest, "rccl").get("version") or None,
        plugin_kind=plugin.get("kind") or None,
        plugin_version=plugin.get("version") or release_of(plugin.get("ref")),
        rccl_tuner_library=(tuner.get("library") or None) if tuner.get("enabled") else None,
        rccl_tuner_config=(tuner.get("config") or None) if tuner.get("enabled") else None)


def read_device_code(path: str | Path) -> dict[str, Any] | None:
    """The device-code report at ``path``; None when there is none (images without the
    diet: ROCm from wheels) or it is unreadable."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def with_device_code(needs: ImageNeeds, report: dict[str, Any] | None) -> ImageNeeds:
    """``needs`` with what the device-code report says; unchanged without a report."""
    if not isinstance(report, dict) or not isinstance(report.get("targets"), list):
        return needs
    libraries = []
    for entry in report.get("checked") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("files"), dict):
            continue
        libraries.append(KernelLibrary(
            str(entry.get("library", "")), str(entry.get("stem", "")),
            str(entry.get("kernels", "")),
            tuple((str(t), int(n)) for t, n in sorted(entry["files"].items())
                  if isinstance(n, int))))
    return replace(needs, device_code_targets=tuple(str(t) for t in report["targets"]),
                   kernel_libraries=tuple(libraries))


def needs_beside(manifest: dict[str, Any], manifest_path: str | Path) -> ImageNeeds:
    """What the image at ``manifest_path`` needs: its manifest, with the device-code report
    the final stage writes beside it (DEVICE_CODE_FILE) where there is one."""
    return with_device_code(needs_from_manifest(manifest),
                            read_device_code(Path(manifest_path).with_name(DEVICE_CODE_FILE)))
