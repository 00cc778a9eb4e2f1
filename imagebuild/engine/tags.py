"""Image names for recipes, and what a command's TARGET argument means.

A build is tagged ``imagebuild/<recipe>:<build hash>`` (the hash of the rendered Dockerfile
and every file of its build context, so any input change gives a new tag) and
``imagebuild/<recipe>:latest`` (the last successful build: what squash and validate use).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import RecipeNotFound
from imagebuild.recipe.load import find_recipe, load_recipe
from imagebuild.recipe.model import Recipe, short_hash

REPOSITORY = "imagebuild"
#: Label holding the build hash; an image whose label matches needs no rebuild.
BUILD_HASH_LABEL = "org.imagebuild.build-hash"


def image_repository(recipe_name: str) -> str:
    return f"{REPOSITORY}/{recipe_name}"


def build_tag(recipe: Recipe, build_hash: str) -> str:
    return f"{image_repository(recipe.name)}:{short_hash(build_hash)}"


def latest_tag(recipe_name: str) -> str:
    return f"{image_repository(recipe_name)}:latest"


@dataclass(frozen=True)
class Target:
    """An image to act on, and the recipe it was built from when known."""

    image: str
    recipe: Recipe | None


def resolve_target(target: str, project: Path | None = None) -> Target:
    """A recipe name or recipe file means its latest build; anything else is an image ref."""
    looks_like_file = target.endswith((".yaml", ".yml"))
    try:
        find_recipe(target, project)
    except RecipeNotFound:
        if looks_like_file:
            raise
        return Target(image=target, recipe=None)
    recipe = load_recipe(target, project)
    return Target(image=latest_tag(recipe.name), recipe=recipe)
