"""Image references: parsing them, naming a recipe's images, what a TARGET argument means.

Every stage may import this module (it starts no process and talks to no engine): lock/
pins a base image reference, the engine builds and pushes, convert and validate name what
they read.

A build is tagged ``imagebuild/<recipe>:<build hash>`` (the hash of the rendered Dockerfile
and every file of its build context, so any input change gives a new tag) and
``imagebuild/<recipe>:latest`` (the last successful build: what squash and validate use).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import EngineError, RecipeNotFound
from imagebuild.recipe.load import find_recipe, load_recipe
from imagebuild.recipe.model import Recipe, short_hash

REPOSITORY = "imagebuild"
#: Label holding the build hash; an image whose label matches needs no rebuild.
BUILD_HASH_LABEL = "org.imagebuild.build-hash"


def split_reference(ref: str) -> tuple[str, str | None]:
    """``registry:5000/name:tag`` -> (``registry:5000/name``, ``tag``); digests are kept."""
    if "@" in ref:
        return ref, None
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1:]
    return ref, None


def normalize_image_id(image_id: str) -> str:
    """Podman reports bare hex ids, docker ``sha256:<hex>``: always the latter."""
    image_id = image_id.strip()
    return image_id if ":" in image_id else f"sha256:{image_id}"


def is_loopback_registry(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0][1:]
    return name in ("localhost", "127.0.0.1", "::1") or name.startswith("127.")


@dataclass(frozen=True)
class ImageRef:
    """A built image: the reference to use, the engine's image id, every tag applied."""

    ref: str
    image_id: str
    tags: tuple[str, ...]
    backend: str


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


def missing_image(ref: str, recipe_name: str | None, backend: str,
                  docker_passed_over: bool = False) -> EngineError:
    """The error for an image the engine does not hold: nothing pulls it implicitly (a
    multi-GB surprise on a cluster, or a registry the node cannot reach). With
    ``docker_passed_over`` (auto found no Docker daemon and asked ``backend``), the image
    may well be in Docker: the hint says that first, not only "build it"."""
    hint = (f"build it first: imagebuild build {recipe_name}" if recipe_name else
            f"pull it first ({backend} pull {ref}), or name a recipe, a .sqsh or a .sif")
    if docker_passed_over:
        hint = (f"Docker was not reachable, so only {backend} was asked: if the image was "
                f"built with Docker, start its daemon or point DOCKER_HOST at it; else {hint}")
    return EngineError(f"{backend}: no image {ref!r} here", hint=hint)
