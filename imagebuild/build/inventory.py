"""What the inventory of a build's image lists besides the image's files, from its plan:
the pinned sources of its components (for the SBOM) and the parts of its size table, handed
to the convert stage as data."""

from __future__ import annotations

from imagebuild.convert.inventory import InventoryScan
from imagebuild.convert.sbom import SbomInputs
from imagebuild.convert.sizes import PartLayout
from imagebuild.convert.sources import ImageSource
from imagebuild.convert.squashfs import reproducible_epoch
from imagebuild.errors import LockError
from imagebuild.lock.check import current_lock
from imagebuild.recipe.model import Recipe
from imagebuild.render.plan import BuildPlan, plan_for


def inventory_inputs(plan: BuildPlan) -> tuple[SbomInputs, PartLayout]:
    """The SBOM's inputs and the size table's parts of ``plan``'s image (locked)."""
    assert plan.lock is not None
    parts = plan.parts.values()
    sbom = SbomInputs(recipe=plan.recipe.name, lock=plan.lock,
                      sources=tuple(source for part in parts for source in part.sources))
    layout = PartLayout.of([size for part in parts for size in part.sizes],
                           plan.runtime_packages, [kept for part in parts for kept in part.keeps])
    return sbom, layout


def inventory_scan(plan: BuildPlan, epoch: int) -> InventoryScan:
    """The stream observer that takes the inventory of ``plan``'s image."""
    return InventoryScan(*inventory_inputs(plan), epoch)


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
    return inventory_scan(plan_for(recipe, lock), epoch if epoch is not None
                          else reproducible_epoch(source.config()))
