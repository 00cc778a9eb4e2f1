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
from imagebuild.convert.squashfs import reproducible_epoch
from imagebuild.convert.tarfilter import RootfsEntry
from imagebuild.errors import LockError
from imagebuild.files import sha256_file, write_text_atomic
from imagebuild.lock.check import current_lock
from imagebuild.recipe.model import Recipe
from imagebuild.render.plan import BuildPlan, plan_for


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


def sbom_inputs(plan: BuildPlan) -> SbomInputs:
    assert plan.lock is not None
    recipe = plan.recipe
    hipblaslt = plan.parts.get("hipblaslt")
    plugin = plan.parts.get("network_plugin")
    tuner = plan.parts.get("rccl_tuner")
    return SbomInputs(
        recipe=recipe.name, lock=plan.lock,
        hipblaslt_subdir=hipblaslt.values.subdir if hipblaslt else ".",
        plugin_kind=plugin.values.kind if plugin else None,
        libfabric_version=plugin.values.libfabric_version if plugin else None,
        rccl_tuner=(tuner.values.url, tuner.values.sha256) if tuner else None)


class InventoryScan(ImageScan):
    """The stream observer of a build: writes the SBOM into the stream at its end."""

    def __init__(self, plan: BuildPlan, epoch: int):
        super().__init__(injects=frozenset({IMAGE_SBOM}))
        self.plan = plan
        self.epoch = epoch
        self.sbom_text = ""
        self.finish = self._sbom_entry

    @staticmethod
    def _sbom_entry(scan: ImageScan) -> list[RootfsEntry]:
        assert isinstance(scan, InventoryScan)
        bom = image_sbom(sbom_inputs(scan.plan), scan.dpkg_status, scan.os_release(), scan.epoch)
        scan.sbom_text = sbom_json(bom)
        return [RootfsEntry(IMAGE_SBOM, data=scan.sbom_text.encode())]


def recipe_scan(recipe: Recipe, source: ImageSource) -> InventoryScan | None:
    """The observer for an image of ``recipe`` (None when the recipe has no current lock:
    the SBOM lists the lock's pins, so it needs the lock the image was built from)."""
    try:
        lock = current_lock(recipe)
    except LockError:
        return None
    if lock is None:
        return None
    epoch = lock.source_date_epoch
    return InventoryScan(plan_for(recipe, lock), epoch if epoch is not None
                         else reproducible_epoch(source.config()))


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
    layout = PartLayout.of(scan.plan)
    parts = classify(scan.files, scan.package_files(), layout)
    sizes = size_table(scan.files, parts, scan.device_code_removed())
    kit = [p for p, part in layout.prefixes if part == "tuning kit"]
    leftover = leftovers((p for p, part in parts.items() if part != BASE), keep=kit)
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
