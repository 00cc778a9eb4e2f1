"""The registry (imagebuild/components/__init__.py) and the folders agree: every component
folder is registered once, under its folder's name; what a component needs and precedes is
registered (what it needs, earlier); the places it reorders are the registry's order with
moves; every template and script its plans name is in its folder; a step template defines
only macros of known places."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import jinja2
import pytest

from imagebuild import components
from imagebuild.components.rccl.component import Rccl
from imagebuild.recipe.load import load_recipe, recipe_names
from imagebuild.recipe.model import GitSource
from imagebuild.render.plan import plan_for
from imagebuild.render.stages import SLOTS
from tests.components.conftest import REPO
from tests.components.cxi_stack.test_cxi_stack import STACK as CXI_STACK

FOLDERS = REPO / "imagebuild" / "components"


def test_every_component_folder_is_registered_under_its_name() -> None:
    folders = sorted(p.parent.name for p in FOLDERS.glob("*/component.py"))
    registered = [c.name for c in components.registered()]
    assert sorted(registered) == folders
    assert not [name for name, n in Counter(registered).items() if n > 1]
    for component in components.registered():
        assert component.folder == FOLDERS / component.name


def test_what_a_component_needs_and_precedes_is_registered() -> None:
    order = [c.name for c in components.registered()]
    for component in components.registered():
        for needed in component.needs:
            assert needed in order[:order.index(component.name)], (component.name, needed)
        for place, other in component.precedes:
            assert place in ("schema", "final") and other in order, (component.name, other)


@pytest.mark.parametrize("place", ["schema", "final"])
def test_a_places_order_holds_every_component_once(place: str) -> None:
    assert sorted(c.name for c in components.ordered(place)) == \
        sorted(c.name for c in components.registered())


def test_what_the_plans_name_is_in_the_folders() -> None:
    """Over the shipped recipes' plans (and 7.2.4's with RCCL pinned and the CXI stack,
    which none enables): every component planned at least once."""
    recipes = [load_recipe(name, REPO) for name in recipe_names(REPO)]
    pinned = Rccl(True, GitSource("https://github.com/ROCm/rccl.git", "rocm-7.1.1"))
    recipes.append(load_recipe("rocm-7.2.4", REPO).with_component("rccl", pinned))
    recipes.append(replace(load_recipe("rocm-7.2.4", REPO).with_component("cxi_stack", CXI_STACK),
                           sites=("cscs-beverin-own-stack",)))
    folders = {c.name: c.folder for c in components.registered()}
    planned = set()
    for recipe in recipes:
        for part in plan_for(recipe, None).parts.values():
            planned.add(part.name)
            named = ([part.stage.template] if part.stage else []) + list(part.steps)
            assert all((folders[part.name] / t).is_file() for t in named), named
            assert all(Path(source).is_file() and source.parent == folders[part.name]
                       for _, source in part.scripts), part.scripts
    assert planned == set(folders)


def test_step_templates_define_only_macros_of_known_places() -> None:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(FOLDERS)))
    for template in sorted(FOLDERS.glob("*/*.j2")):
        if template.name == "stage.j2":
            continue
        source = env.loader.get_source(env, f"{template.parent.name}/{template.name}")[0]
        macros = {node.name for node in env.parse(source).find_all(jinja2.nodes.Macro)}
        assert macros and macros <= set(SLOTS), (template, macros - set(SLOTS))
