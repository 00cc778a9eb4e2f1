"""YAML text for the generated pipelines, laid out like a hand-written one: block style,
lists indented under their key, multi-line scripts as literal blocks, blank lines between
top-level entries, no anchors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml


def comment(*lines: str) -> str:
    """A block of ``#`` lines and a blank line after it."""
    return "".join(f"# {line}\n" for line in lines) + "\n"


def shell_script(*lines: str) -> str:
    """Lines joined into one multi-line script (dumped as a literal block)."""
    return "\n".join(lines) + "\n"


class _Dumper(yaml.SafeDumper):
    """Block style, lists indented under their key, multi-line strings as literal blocks."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # anchors and aliases would make the pipeline harder to read


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _represent_str)


def dump(data: Any, spaced_sections: Sequence[str] = ()) -> str:
    """YAML text; top-level keys, and the entries of ``spaced_sections``, separated by a
    blank line, like a hand-written pipeline."""
    text = yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     width=1000, allow_unicode=False)  # no folded lines
    text = re.sub(r"\n(?=[^\s#-])", "\n\n", text)
    for section in spaced_sections:
        head, sep, body = text.partition(f"\n{section}:\n")
        first, *rest = re.split(r"\n(?=  [^\s-])", body)
        text = head + sep + first + "".join("\n\n" + entry for entry in rest)
    return text
