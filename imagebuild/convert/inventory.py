"""After a build: the image's size table, its SBOM beside the artifacts (``<name>.cdx.json``
with a ``.sha256``), and the build record that keeps both (``<name>.build.json``).

Everything comes from one pass over the image's files: the squash's own stream when the
build squashes (the SBOM is then also written into the squashfs and SIF at
/opt/imagebuild/sbom.cdx.json), else an export of its own. A later build of the same image
reads the record instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.convert.artifacts import sidecar_path, write_sidecar
from imagebuild.convert.sbom import IMAGE_SBOM, SbomInputs, image_sbom, sbom_json
from imagebuild.convert.scan import ImageScan, scan_image
from imagebuild.convert.sizes import BASE, PartLayout, SizeTable, classify, leftovers, size_table
from imagebuild.convert.sources import ImageSource
from imagebuild.convert.tarfilter import RootfsEntry
from imagebuild.files import sha256_file, write_text_atomic


@dataclass(frozen=True)
class Inventory:
    sizes: SizeTable
    sbom: Path
    sbom_sha256: str
    #: component kind (pypi, deb, source, base) -> count
    components: dict[str, int]
    #: build-only files outside the base image (kind -> paths), see sizes.leftovers
    leftovers: dict[str, list[str]]
    scanned: bool = True

    def lines(self) -> list[str]:
        counts = ", ".join(f"{n} {kind}" for kind, n in self.components.items())
        lines = [*self.sizes.lines(), f"sbom  {self.sbom}  ({counts})"]
        for kind, paths in self.leftovers.items():
            lines.append(f"warning: {len(paths)} {kind} in the final stage outside the base "
                         f"image (e.g. /{paths[0]})")
        return lines


class InventoryScan(ImageScan):
    """The stream observer of a build: writes the SBOM into the stream at its end. What the
    SBOM lists besides the image's files (``sbom``) and the parts of the size table
    (``layout``) come as data from the build's plan (imagebuild.build.inventory)."""

    def __init__(self, sbom: SbomInputs, layout: PartLayout, epoch: int):
        super().__init__(injects=frozenset({IMAGE_SBOM}))
        self.sbom = sbom
        self.layout = layout
        self.epoch = epoch
        self.sbom_text = ""
        self.finish = self._sbom_entry

    @staticmethod
    def _sbom_entry(scan: ImageScan) -> list[RootfsEntry]:
        assert isinstance(scan, InventoryScan)
        bom = image_sbom(scan.sbom, scan.dpkg_status, scan.os_release(), scan.epoch,
                         scan.manifest())
        scan.sbom_text = sbom_json(bom)
        return [RootfsEntry(IMAGE_SBOM, data=scan.sbom_text.encode())]


def record_path(output_dir: Path, name: str) -> Path:
    return output_dir / f"{name}.build.json"


def sbom_path(output_dir: Path, name: str) -> Path:
    return output_dir / f"{name}.cdx.json"


def component_counts(sbom_text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for component in json.loads(sbom_text).get("components", []):
        ref = component.get("bom-ref", "")
        kind = ("source" if ref.startswith("source:") else "base image" if ref == "base-image"
                else component.get("purl", "pkg:other/").split("/", 1)[0].removeprefix("pkg:"))
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


def take_inventory(scan: InventoryScan, source: ImageSource, output_dir: Path, name: str,
                   image_id: str) -> Inventory:
    """The inventory of the image ``scan`` saw (exporting ``source`` now if the squash did
    not stream it), written beside the artifacts and recorded; or the record's, if it is of
    this image and its SBOM file is intact."""
    if not scan.done:
        recorded = recorded_inventory(output_dir, name, image_id)
        if recorded is not None:
            return recorded
        scan_image(source, scan)
    layout = scan.layout
    parts = classify(scan.files, scan.package_files(), layout)
    sizes = size_table(scan.files, parts, layout, scan.device_code_removed())
    leftover = leftovers((p for p, part in parts.items() if part != BASE), keep=layout.keep)
    output_dir.mkdir(parents=True, exist_ok=True)
    path = sbom_path(output_dir, name)
    write_text_atomic(path, scan.sbom_text)
    digest = sha256_file(path)
    write_sidecar(path, digest)
    inventory = Inventory(sizes, path, digest, component_counts(scan.sbom_text), leftover)
    write_text_atomic(record_path(output_dir, name), json.dumps({
        "image_id": image_id,
        "sizes": sizes.as_dict(),
        "sbom": {"path": path.name, "sha256": digest, "format": "CycloneDX 1.6 JSON",
                 "in_image": "/" + IMAGE_SBOM, "components": inventory.components},
        "leftovers": {kind: {"count": len(paths), "paths": paths[:20]}
                      for kind, paths in leftover.items()},
    }, indent=2) + "\n")
    return inventory


def recorded_inventory(output_dir: Path, name: str, image_id: str) -> Inventory | None:
    try:
        record: dict[str, Any] = json.loads(record_path(output_dir, name).read_text())
        path = output_dir / record["sbom"]["path"]
        if record["image_id"] != image_id or not sidecar_path(path).read_text().startswith(
                record["sbom"]["sha256"]) or sha256_file(path) != record["sbom"]["sha256"]:
            return None
        removed = record["sizes"].get("device_code_removed")
        sizes = SizeTable(tuple((p["part"], p["bytes"], p["files"])
                                for p in record["sizes"]["parts"]),
                          (removed["bytes"], removed["files"]) if removed else None)
        return Inventory(sizes, path, record["sbom"]["sha256"], record["sbom"]["components"],
                         {k: v["paths"] for k, v in record["leftovers"].items()}, scanned=False)
    except (OSError, ValueError, KeyError, TypeError):
        return None
