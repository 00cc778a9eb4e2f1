"""The build plan: a recipe, its checked lock, each enabled component's plan and every value
the renderers derive from them, made once, frozen and typed. The Dockerfile, the build
context and the manifest are rendered from a plan; none of them reads or checks a lock
itself.

``make_plan`` reads nothing: what it needs from outside the recipe and the lock (the site
profiles, the project's files) comes resolved in its ``PlanInputs``; ``plan_for`` resolves
them and makes the plan, as the commands do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from imagebuild import components
from imagebuild.components.protocol import ComponentPlan, PlanContext, PlanInputs
from imagebuild.errors import RenderError, short_path
from imagebuild.lock.epoch import EPOCH_LABEL
from imagebuild.lock.model import Lock
from imagebuild.recipe.image_network import ImageNetwork, has_verbs
from imagebuild.recipe.model import Recipe
from imagebuild.render.inputs import plan_inputs
from imagebuild.render.layout import IMAGE_MANIFEST, LABEL_NAMESPACE, RESERVED_ENV

#: Labels imagebuild writes from the base image; a recipe may not set them.
GENERATED_OCI_LABELS = ("org.opencontainers.image.base.name",
                        "org.opencontainers.image.base.digest")


@dataclass(frozen=True)
class BuildPlan:
    recipe: Recipe
    #: None: unlocked, rendered for review only (a build refuses it).
    lock: Lock | None
    #: OS packages of the toolchain stage: the recipe's build_packages, then what the
    #: components' stages need.
    build_packages: tuple[str, ...]
    #: OS packages of the final stage: the recipe's, then what the components' installs need.
    runtime_packages: tuple[str, ...]
    added_packages: tuple[str, ...]
    library_path: tuple[str, ...]
    #: Files the final stage checks with ldd (every shared library they need is present).
    linked_files: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    #: Cache-mount id suffix shared by builds on the same base distribution.
    cache_scope: str
    #: Each enabled component's plan, by name, in the registry's order.
    parts: dict[str, ComponentPlan] = field(default_factory=dict, hash=False)

    @property
    def locked(self) -> bool:
        return self.lock is not None

    @property
    def builds_from_source(self) -> bool:
        return any(part.stage is not None for part in self.parts.values())

    @property
    def image_network(self) -> ImageNetwork:
        """What the image offers RCCL for its network: the plugin a component installs,
        and RCCL's IB transport where the image's packages give libibverbs its providers."""
        plugin = next((p.net_plugin for p in self.parts.values() if p.net_plugin), None)
        return ImageNetwork(plugin=plugin, verbs=has_verbs(self.runtime_packages),
                            rocm=self.recipe.rocm)

    def in_final_order(self) -> list[ComponentPlan]:
        """The parts in the order of their steps in the final stage."""
        return [self.parts[c.name] for c in components.ordered("final") if c.name in self.parts]

    def stages(self) -> tuple[list[ComponentPlan], list[ComponentPlan]]:
        """The components' build stages before the python stage, and after it: from the first
        stage that mounts the venv on."""
        before: list[ComponentPlan] = []
        after: list[ComponentPlan] = []
        for part in self.parts.values():
            if part.stage is not None:
                (after if after or part.stage.on_venv else before).append(part)
        return before, after


def make_plan(recipe: Recipe, lock: Lock | None, inputs: PlanInputs) -> BuildPlan:
    """The plan for ``recipe`` and its lock, which the caller has checked
    (lock.check.current_lock or check_lock; None: unlocked, for review renders). The plan
    never checks a lock again, and reads nothing beyond its arguments."""
    _check_recipe(recipe)
    parts: dict[str, ComponentPlan] = {}
    for component, section in components.enabled(recipe):
        needed = {name: parts[name] for name in component.needs if name in parts}
        parts[component.name] = component.plan(
            PlanContext(recipe, section, lock, inputs, needed))
    _check_owned_env(recipe, parts)
    final = [parts[c.name] for c in components.ordered("final") if c.name in parts]
    build = dict.fromkeys([*recipe.build_packages,
                           *(p for part in parts.values() for p in part.build_packages)])
    runtime = list(recipe.os_packages)
    added = [p for p in dict.fromkeys(p for part in final for p in part.runtime_packages)
             if p not in runtime]
    return BuildPlan(
        recipe=recipe, lock=lock, parts=parts,
        build_packages=tuple(build), runtime_packages=tuple(runtime + added),
        added_packages=tuple(added),
        library_path=tuple(d for part in parts.values() for d in part.library_path),
        linked_files=tuple(f for part in final for f in part.linked_files),
        labels=_labels(recipe, lock), cache_scope=_cache_scope(recipe))


def plan_for(recipe: Recipe, lock: Lock | None, project: Path | None = None) -> BuildPlan:
    """``make_plan`` with the inputs resolved here (``project``: the command's project)."""
    return make_plan(recipe, lock, plan_inputs(recipe, project))


def _labels(recipe: Recipe, lock: Lock | None) -> tuple[tuple[str, str], ...]:
    labels = [(key, value) for key, value in recipe.labels]
    labels.append(("org.opencontainers.image.base.name", recipe.base_image.split("@", 1)[0]))
    if lock is not None:
        labels.append(("org.opencontainers.image.base.digest", lock.base_digest))
    labels += [
        ("imagebuild.recipe", recipe.name),
        ("imagebuild.input-hash", recipe.input_hash()),
        ("imagebuild.lock-hash", lock.file_hash() if lock else "UNLOCKED"),
        ("imagebuild.rocm", recipe.rocm or "none"),
        ("imagebuild.torch", recipe.wheels.version_of("torch") or "none"),
        ("imagebuild.python", recipe.python),
        ("imagebuild.gpu-targets", ",".join(recipe.gpu_targets) or "none"),
        ("imagebuild.manifest", IMAGE_MANIFEST),
    ]
    if lock is not None and lock.source_date_epoch is not None:
        # The squash step clamps every mtime to it (imagebuild.lock.epoch).
        labels.append((EPOCH_LABEL, str(lock.source_date_epoch)))
    return tuple(labels)


def _check_recipe(recipe: Recipe) -> None:
    where = short_path(recipe.path)
    for key, _ in recipe.env:
        if key in RESERVED_ENV:
            raise RenderError(f"{where}: env.{key}: set by imagebuild itself "
                              f"(reserved: {', '.join(RESERVED_ENV)})")
    for key, _ in recipe.labels:
        if key.startswith(LABEL_NAMESPACE) or key in GENERATED_OCI_LABELS:
            raise RenderError(f"{where}: labels.{key}: set by imagebuild "
                              f"itself (it owns {LABEL_NAMESPACE}* and the base-image labels)")


def _check_owned_env(recipe: Recipe, parts: dict[str, ComponentPlan]) -> None:
    """A variable a component sets for what it built is not the recipe's to set."""
    owned = {variable.name: variable.owned_while for part in parts.values()
             for variable in part.env if variable.owned_while}
    for key, _ in recipe.env:
        if key in owned:
            raise RenderError(f"{short_path(recipe.path)}: env.{key}: set by imagebuild "
                              f"itself while {owned[key]}")


def _cache_scope(recipe: Recipe) -> str:
    """The base image's repository, sanitised: apt lists and ccache are only shared between
    builds on the same distribution and compilers; every ROCm release of
    rocm/dev-ubuntu-24.04 shares one, a Debian test base gets its own."""
    repository = re.split(r"[@]", recipe.base_image)[0]
    name = repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository
    return re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-")


def device_code_diet(recipe: Recipe) -> bool:
    """Whether the final stage keeps device code for gpu_targets only: images whose ROCm comes
    from the base image, which installs kernels for every architecture (the ROCm-from-wheels
    kind gets its targets' device packs alone through the extras)."""
    return recipe.rocm is not None and not recipe.rocm_wheels and bool(recipe.gpu_targets)
