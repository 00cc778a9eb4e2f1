"""A recipe and the parents it ``extends``: read, each file checked on its own, merged.

Child values win; every leaf keeps the file and line it came from, so a problem in the
merged recipe still names the file that wrote the value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagebuild.errors import Problem
from imagebuild.recipe import fields, grammar, spec
from imagebuild.recipe.format import defaults, lookup, recipe_spec
from imagebuild.recipe.located import KeyPath, NotYaml, Origin, read_mapping
from imagebuild.recipe.spec_check import check_against_spec

RECIPE_SUFFIX = ".yaml"


def merged_chain(path: Path, problems: list[Problem]
                 ) -> tuple[dict[str, Any], dict[KeyPath, Origin], tuple[Path, ...]]:
    """The recipe at ``path`` merged over its parents: (values, where each came from, the
    files, child first). Problems of any file are appended to ``problems``."""
    chain = read_chain(path, problems)
    merged: dict[str, Any] = {}
    origins: dict[KeyPath, Origin] = {}
    for data, file_origins in reversed(chain):
        merge(merged, data, ())
        origins.update(file_origins)
    return merged, origins, tuple(file_origins[()].file for _, file_origins in chain)


# --- loading ------------------------------------------------------------------------------

def read_chain(path: Path, problems: list[Problem]) -> list[tuple[dict, dict[KeyPath, Origin]]]:
    """The recipe and its parents, child first; each validated on its own."""
    chain: list[tuple[dict, dict[KeyPath, Origin]]] = []
    seen: list[Path] = []
    current: Path | None = path
    while current is not None:
        if current in seen:
            cycle = " -> ".join(p.name for p in [*seen, current])
            problems.append(Problem(seen[-1], chain[-1][1][("extends",)].line, "extends",
                                    f"extends cycle: {cycle}"))
            break
        seen.append(current)
        loaded = _load_file(current, problems)
        if loaded is None:
            break
        data, origins = loaded
        _check_file(current, data, origins, problems)
        chain.append((data, origins))
        parent = data.get("extends")
        if not isinstance(parent, str) or not grammar.matches(grammar.EXTENDS, parent):
            break
        parent_path = current.parent / f"{parent.removesuffix(RECIPE_SUFFIX)}{RECIPE_SUFFIX}"
        if not parent_path.is_file():
            problems.append(Problem(current, origins[("extends",)].line, "extends",
                                    f"parent recipe {parent_path.name!r} not found beside "
                                    f"{current.name}"))
            break
        current = parent_path
    return chain


def _load_file(path: Path, problems: list[Problem]) -> tuple[dict, dict[KeyPath, Origin]] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(Problem(path, None, "", f"cannot read recipe: {exc}"))
        return None
    try:
        read = read_mapping(text, path, problems)
    except NotYaml as exc:
        problems.append(Problem(path, exc.line, "", f"invalid YAML: {exc.what}"))
        return None
    if read is None:
        problems.append(Problem(path, 1, "", "a recipe must be a YAML mapping of keys to values"))
    return read


# --- per-file validation --------------------------------------------------------------------

def _check_file(file: Path, data: dict, origins: dict[KeyPath, Origin],
                problems: list[Problem]) -> None:
    if "version" not in data:
        problems.append(Problem(file, 1, "version",
                                f"missing; every recipe file starts with 'version: "
                                f"{spec.FORMAT_VERSION}'"))
    elif data["version"] != spec.FORMAT_VERSION and isinstance(data["version"], int) \
            and data["version"] > spec.FORMAT_VERSION:
        problems.append(Problem(file, origins[("version",)].line, "version",
                                f"recipe format {data['version']} is newer than this imagebuild "
                                f"reads ({spec.FORMAT_VERSION}); upgrade imagebuild"))
        return
    check_against_spec(recipe_spec(), data, (), file, origins, problems)


# --- merging --------------------------------------------------------------------------------

def merge(into: dict[str, Any], child: dict[str, Any], path: KeyPath) -> None:
    """Child values win; mappings merge key by key; lists and scalars are replaced.

    In tables (env, labels, wheels.packages) a null removes the inherited entry.
    """
    for key, value in child.items():
        if key == "extends" and not path:
            continue
        here = path + (key,)
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value, here)
        elif value is None and isinstance(lookup(path), fields.Table):
            into.pop(key, None)
        else:
            into[key] = _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return list(value)
    return value


def with_defaults(merged: dict[str, Any]) -> dict[str, Any]:
    out = {k: _copy(v) for k, v in defaults().items()}
    merge(out, merged, ())
    return out
