"""What an image needs from the node, from its manifest (/opt/imagebuild/manifest.json,
schema: imagebuild/data/image-manifest.schema.json): its ROCm release, the GPU targets
it is built for, its network plugin and the libfabric symbol versions that plugin
needs (recorded by the build's plugin check), and its Python environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..image_manifest import section


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

    @property
    def rocm_line(self) -> str | None:
        """"7.2.4" -> "7.2": AMD's tables speak of release lines (7.2.x)."""
        return ".".join(self.rocm.split(".")[:2]) if self.rocm else None


def needs_from_manifest(manifest: dict[str, Any], name: str | None = None) -> ImageNeeds:
    plugin = section(manifest, "network_plugin")
    elf: dict[str, Any] = plugin["elf"] if isinstance(plugin.get("elf"), dict) else {}
    targets = manifest.get("gpu_targets") or []
    return ImageNeeds(
        name=name or str(manifest.get("recipe") or "image"),
        rocm=manifest.get("rocm_version") or None,
        gpu_targets=tuple(str(t) for t in targets),
        plugin=bool(plugin.get("enabled")),
        plugin_library=plugin.get("library") or elf.get("library") or None,
        fabric_needs=tuple(elf.get("libfabric_versions_needed") or plugin.get(
            "libfabric_versions_needed") or ()),
        venv=manifest.get("venv") or None)
