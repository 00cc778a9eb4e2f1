"""A value against a field spec (imagebuild.recipe.fields): every place it departs, as a
problem with its file, line and key path, and what was expected (with a did-you-mean for an
unknown key). Recipes, site profiles and the CI configuration are checked with it."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from imagebuild.errors import Problem
from imagebuild.recipe import fields, grammar
from imagebuild.recipe.located import KeyPath, Origin, dotted


def check_against_spec(s: fields.Spec, value: Any, path: KeyPath, file: Path,
                       origins: dict[KeyPath, Origin], problems: list[Problem]) -> None:
    """Append a problem (file, line, dotted key, what was expected) for every place where
    ``value`` departs from the spec ``s``."""
    def problem(message: str, at: KeyPath = path) -> None:
        origin = origins.get(at) or origins.get(path) or Origin(file, 0)
        problems.append(Problem(file, origin.line or None, dotted(at), message))

    if value is None and getattr(s, "nullable", False):
        return
    if isinstance(s, fields.Obj):
        if not isinstance(value, dict):
            problem(f"expected {s.expected}, got {_describe(value)}")
            return
        for key, item in value.items():
            if key not in s.fields:
                hint = difflib.get_close_matches(key, list(s.fields), n=1)
                problem("unknown key" + (f"; did you mean {hint[0]!r}?" if hint else
                                         f" (allowed: {', '.join(s.fields)})"), path + (key,))
                continue
            check_against_spec(s.fields[key], item, path + (key,), file, origins, problems)
    elif isinstance(s, fields.Table):
        if not isinstance(value, dict):
            problem(f"expected {s.expected}, got {_describe(value)}")
            return
        for key, item in value.items():
            if s.key.pattern and not grammar.matches(s.key.pattern, key):
                problem(f"invalid key {key!r}: expected {s.key.expected}", path + (key,))
            elif item is not None:  # null removes an inherited entry
                check_against_spec(s.value, item, path + (key,), file, origins, problems)
    elif isinstance(s, fields.Seq):
        if not isinstance(value, list):
            problem(f"expected {s.expected}, got {_describe(value)}")
            return
        for i, item in enumerate(value):
            check_against_spec(s.item, item, path + (str(i),), file, origins, problems)
        if all(isinstance(v, (str, int, float, bool)) for v in value):
            duplicates = sorted({str(v) for v in value if value.count(v) > 1})
            if duplicates:
                problem(f"duplicate entries: {', '.join(duplicates)}")
    elif isinstance(s, fields.Bool):
        if not isinstance(value, bool):
            problem(f"expected {s.expected}, got {_describe(value)}")
    elif isinstance(s, fields.Int):
        if not isinstance(value, int) or isinstance(value, bool):
            problem(f"expected {s.expected} (an integer), got {_describe(value)}")
        elif s.enum and value not in s.enum:
            problem(f"expected one of {', '.join(map(str, s.enum))}, got {value}")
        elif s.minimum is not None and value < s.minimum:
            problem(f"expected {s.expected} (at least {s.minimum}), got {value}")
    elif isinstance(s, fields.Str):
        if value is None and s.nullable:
            return
        if not isinstance(value, str):
            quote = f'; quote it: "{value}"' if isinstance(value, (int, float)) \
                and not isinstance(value, bool) else ""
            problem(f"expected {s.expected}, got {_describe(value)}{quote}")
            return
        unsafe = grammar.text_problem(value)
        if unsafe:
            problem(f"{unsafe}: {value!r}")
        elif s.enum and value not in s.enum:
            hint = difflib.get_close_matches(value, list(s.enum), n=1)
            problem(f"expected {s.expected}, got {value!r}"
                    + (f"; did you mean {hint[0]!r}?" if hint else ""))
        elif s.pattern and not grammar.matches(s.pattern, value):
            why = s.explain(value) if s.explain else None
            problem(f"{value!r} {why}" if why else f"expected {s.expected}, got {value!r}")
        elif s.check and (why := s.check(value)):
            problem(f"{value!r} {why}")


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    return repr(value)
