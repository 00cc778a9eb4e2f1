"""The image's optional components, one folder each, and the one place that lists them.

``COMPONENTS`` holds them in Dockerfile order: the order of their build stages, the order
every stage loops over them in. Adding a component is its folder (``component.py`` making
its ``COMPONENT``, with its templates, check and files beside it) and its line here; no
stage names a component (tests/test_package_rules.py). The stages read the tuple when they
run, so a test may register one more for the time of a test.
"""

from __future__ import annotations

from collections.abc import Iterator

from imagebuild.components.cxi_stack import component as cxi_stack
from imagebuild.components.hipblaslt import component as hipblaslt
from imagebuild.components.megatron import component as megatron
from imagebuild.components.network_plugin import component as network_plugin
from imagebuild.components.protocol import Component
from imagebuild.components.rccl import component as rccl
from imagebuild.components.rccl_tests import component as rccl_tests
from imagebuild.components.rccl_tuner import component as rccl_tuner
from imagebuild.components.transformer_engine import component as transformer_engine
from imagebuild.recipe.model import Recipe, Section

COMPONENTS: tuple[Component, ...] = (
    hipblaslt.COMPONENT,
    cxi_stack.COMPONENT,
    rccl.COMPONENT,
    network_plugin.COMPONENT,
    rccl_tests.COMPONENT,
    rccl_tuner.COMPONENT,
    transformer_engine.COMPONENT,
    megatron.COMPONENT,
)


def registered() -> tuple[Component, ...]:
    """The components, in the registry's order."""
    return COMPONENTS


def ordered(place: str) -> tuple[Component, ...]:
    """The components in the order of ``place`` (``schema``, ``final``): the registry's,
    each component that ``precedes`` another there moved right before it."""
    order = list(COMPONENTS)
    for component in COMPONENTS:
        target = dict(component.precedes).get(place)
        if target is not None and any(c.name == target for c in order):
            order.remove(component)
            order.insert([c.name for c in order].index(target), component)
    return tuple(order)


def enabled(recipe: Recipe) -> Iterator[tuple[Component, Section]]:
    """The recipe's components that are on, with their sections, in the registry's order."""
    for component in COMPONENTS:
        section = recipe.components.get(component.name)
        if section is not None and section.enabled:
            yield component, section
