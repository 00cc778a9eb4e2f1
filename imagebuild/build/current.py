"""Is a recipe's ``:latest`` image the build its recipe and lock make today? ``squash`` and
``validate`` of a recipe name act on that tag; an image built before the recipe or its lock
changed is refused rather than converted or judged in the recipe's name."""

from __future__ import annotations

from imagebuild.build.image import context_hash
from imagebuild.build.prepare import prepare_build
from imagebuild.engine.base import Engine
from imagebuild.errors import EngineError, LockError
from imagebuild.images import BUILD_HASH_LABEL
from imagebuild.recipe.model import Recipe


def check_current(engine: Engine, recipe: Recipe, ref: str) -> None:
    """EngineError when ``ref`` (the recipe's latest tag) is not what the recipe and its lock
    build now; nothing when it is, or when the recipe has no current lock to compare with."""
    try:
        prepared = prepare_build(recipe)
    except LockError:
        return  # unlocked or stale: `build` says so; the image cannot be compared
    with prepared.staged_context("current") as context:
        now = context_hash(context)
    built = engine.image_labels(ref).get(BUILD_HASH_LABEL)
    if built == now:
        return
    what = f"built from inputs {built[:19]}" if built else "built without imagebuild's label"
    raise EngineError(
        f"{ref} is not the current build of {recipe.name} ({what}; the recipe, its lock and "
        f"the check scripts now make {now[:19]})",
        hint=f"imagebuild build {recipe.name} first, or name the image itself ({ref}) to use "
             "it as it is")
