"""A field spec (imagebuild.recipe.spec) as JSON Schema (draft 2020-12), for editors and
linters: schema/recipe.schema.json and schema/site.schema.json are written from it."""

from __future__ import annotations

from typing import Any

from imagebuild.recipe import grammar
from imagebuild.recipe.fields import Bool, Int, Seq, Spec, Str, Table


def to_schema(spec: Spec) -> dict[str, Any]:
    out = _to_schema_not_null(spec)
    if getattr(spec, "nullable", False) and not isinstance(spec, Str):
        out = {"anyOf": [out, {"type": "null"}]}
    return out


def _to_schema_not_null(spec: Spec) -> dict[str, Any]:
    if isinstance(spec, Str):
        out: dict[str, Any] = {"type": ["string", "null"] if spec.nullable else "string",
                               "description": spec.expected}
        if spec.enum:
            out["enum"] = list(spec.enum) + ([None] if spec.nullable else [])
        patterns = ([spec.pattern] if spec.pattern else []) + (
            list(grammar.SAFE_TEXT_PATTERNS) if spec.free_text else [])
        if len(patterns) == 1:
            out["pattern"] = patterns[0]
        elif patterns:
            out["allOf"] = [{"pattern": p} for p in patterns]
        return out
    if isinstance(spec, Bool):
        return {"type": "boolean"}
    if isinstance(spec, Int):
        out = {"type": "integer", "description": spec.expected}
        if spec.enum:
            out["enum"] = list(spec.enum)
        if spec.minimum is not None:
            out["minimum"] = spec.minimum
        return out
    if isinstance(spec, Seq):
        return {"type": "array", "items": to_schema(spec.item), "uniqueItems": True}
    if isinstance(spec, Table):
        value = to_schema(spec.value)
        # A child recipe removes an inherited entry by setting it to null.
        value = {"anyOf": [value, {"type": "null"}]}
        return {"type": "object", "propertyNames": {"pattern": spec.key.pattern},
                "additionalProperties": value}
    out = {"type": "object", "additionalProperties": False,
           "properties": {k: to_schema(v) for k, v in spec.fields.items()}}
    if spec.description:
        out["description"] = spec.description
    return out
