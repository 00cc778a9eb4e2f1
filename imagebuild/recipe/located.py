"""YAML with the file and line of every key: the one reader of the project's input files
(recipes, site profiles, the CI configuration), so that every problem with one names its
place (``file:line: key.path: ...``).

The YAML node tree keeps each key's line; ``read_mapping`` turns a document that is one
mapping (each of these files is) into plain data and an ``origins`` map from key path to
(file, line). Non-string and duplicate keys become problems
instead of being silently accepted (YAML would keep the last of two keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imagebuild.errors import Problem

#: A key path in a document: ("wheels", "packages", "torch"); a list item by its index.
KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class Origin:
    file: Path
    line: int


class NotYaml(Exception):
    """Text that is not valid YAML: the line the parser stopped at and what it said."""

    def __init__(self, line: int | None, what: str):
        super().__init__(what)
        self.line = line
        self.what = what


def read_mapping(text: str, file: Path, problems: list[Problem]
                 ) -> tuple[dict[str, Any], dict[KeyPath, Origin]] | None:
    """The YAML document ``text`` (of ``file``) as plain data and the origin of every key,
    key problems appended to ``problems``; None when the document is not a mapping (each
    caller says what it must be). Raises NotYaml."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise NotYaml(mark.line + 1 if mark else None,
                      getattr(exc, "problem", None) or str(exc)) from exc
    if not isinstance(node, yaml.MappingNode):
        return None
    origins: dict[KeyPath, Origin] = {(): Origin(file, 1)}
    return node_to_python(node, file, (), origins, problems), origins


def node_to_python(node: yaml.Node, file: Path, path: KeyPath, origins: dict[KeyPath, Origin],
                   problems: list[Problem]) -> Any:
    """A composed YAML node as plain data, recording the line of every key in ``origins``;
    non-string and duplicate keys become problems instead of being silently accepted."""
    origins.setdefault(path, Origin(file, node.start_mark.line + 1))
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            line = key_node.start_mark.line + 1
            if not isinstance(key, str) or key_node.tag != "tag:yaml.org,2002:str":
                problems.append(Problem(file, line, dotted(path), "keys must be strings"))
                continue
            if key in result:
                problems.append(Problem(file, line, dotted(path + (key,)),
                                        "duplicate key (YAML would silently keep the last one)"))
                continue
            origins[path + (key,)] = Origin(file, line)
            result[key] = node_to_python(value_node, file, path + (key,), origins, problems)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [node_to_python(item, file, path + (str(i),), origins, problems)
                for i, item in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node)) if node.tag != "tag:yaml.org,2002:str" \
        else node.value


def dotted(path: KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if part.isdigit() else (f".{part}" if out else part)
    return out
