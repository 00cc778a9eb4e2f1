"""The recipe format: the image's own keys (``imagebuild.recipe.spec.CORE``) and each
registered component's section, with the values a recipe may leave out.

The loader validates against ``recipe_spec()`` and ``json_schema()`` writes the same tree as
schema/recipe.schema.json, so both follow the registry (tests/recipe/test_schema.py checks
that they agree in practice too).
"""

from __future__ import annotations

from typing import Any

from imagebuild import components
from imagebuild.recipe import fields, spec
from imagebuild.recipe.schema import to_schema

#: Values of the image's own keys a recipe may leave out. Shared parts belong in a parent
#: recipe, not here: these are only the switches whose absence has one obvious meaning.
CORE_DEFAULTS: dict[str, Any] = {
    "description": "",
    "os_packages": [],
    "rocm_from": "base_image",
    "build_packages": [],
    "sites": [],
    "python": "3.12",
    "gpu_targets": [],
    "accept_untested_targets": [],
    "env": {},
    "labels": {},
    "dockerfile": {"syntax": "docker/dockerfile:1.7"},
}


def _with_sections(core: dict[str, Any], sections: dict[str, Any]) -> dict[str, Any]:
    """``core`` with ``sections`` inserted before ``spec.SECTIONS_BEFORE``."""
    out: dict[str, Any] = {}
    for key, value in core.items():
        if key == spec.SECTIONS_BEFORE:
            out.update(sections)
        out[key] = value
    return out


def recipe_spec() -> fields.Obj:
    """The whole recipe format: the core keys and every registered component's section."""
    sections = {c.name: c.spec for c in components.ordered("schema")}
    return fields.Obj(fields=_with_sections(spec.CORE.fields, sections),
                    required=spec.CORE.required, description=spec.CORE.description)


def defaults() -> dict[str, Any]:
    """The values every merged recipe starts from."""
    sections = {c.name: dict(c.defaults) for c in components.ordered("schema")}
    return _with_sections(CORE_DEFAULTS, sections)


def lookup(path: tuple[str, ...]) -> fields.Spec | None:
    """The spec at a key path (Table keys are free), or None for an unknown path."""
    found: fields.Spec = recipe_spec()
    for key in path:
        if isinstance(found, fields.Obj):
            if key not in found.fields:
                return None
            found = found.fields[key]
        elif isinstance(found, fields.Table):
            found = found.value
        elif isinstance(found, fields.Seq):
            found = found.item
        else:
            return None
    return found


def json_schema() -> dict[str, Any]:
    """The recipe format as JSON Schema (draft 2020-12) for editors and linters."""
    schema = to_schema(recipe_spec())
    # One file is validated alone; the other required keys may come from a parent.
    schema["required"] = ["version"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://imagebuild.dev/schema/recipe.schema.json",
        "title": "imagebuild recipe",
        **schema,
    }
