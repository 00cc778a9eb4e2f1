"""Field specs: the data a file format is described with.

A format is one tree of specs: the validator (``imagebuild.recipe.spec_check``) walks it,
and ``imagebuild.recipe.schema.to_schema`` turns the same tree into JSON Schema for editors,
so both agree by construction. Recipes (``imagebuild.recipe.spec`` and each component's
section), site profiles (``imagebuild.recipe.site_spec``) and the CI configuration are
described with these specs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from imagebuild.recipe import grammar


@dataclass(frozen=True)
class Str:
    expected: str
    pattern: str | None = None
    enum: tuple[str, ...] | None = None
    #: Semantic check beyond the pattern (e.g. PEP 440); returns a problem or None.
    check: Callable[[str], str | None] | None = None
    #: A closer reason than ``expected`` when the pattern refuses a value (e.g. the nearest
    #: GPU target to a typo); returns None to keep the general message.
    explain: Callable[[str], str | None] | None = None
    free_text: bool = False
    nullable: bool = False


@dataclass(frozen=True)
class Bool:
    expected: str = "true or false"


@dataclass(frozen=True)
class Int:
    expected: str
    enum: tuple[int, ...] | None = None
    minimum: int | None = None
    nullable: bool = False


@dataclass(frozen=True)
class Seq:
    item: Spec
    expected: str = "a list"
    nullable: bool = False


@dataclass(frozen=True)
class Table:
    """A mapping whose keys are data (env names, label keys, package names)."""

    key: Str
    value: Spec
    expected: str = "a mapping"
    nullable: bool = False


@dataclass(frozen=True)
class Obj:
    fields: dict[str, Spec]
    required: tuple[str, ...] = ()
    expected: str = "a mapping"
    description: str = ""
    doc: dict[str, str] = field(default_factory=dict)
    #: null stands for an absent section (site profiles write ``key: null``).
    nullable: bool = False


Spec = Str | Bool | Int | Seq | Table | Obj


def exact_version(value: str) -> str | None:
    from packaging.version import InvalidVersion, Version

    try:
        Version(value)
    except InvalidVersion:
        return "is not a valid PEP 440 version"
    return None


def requirement(value: str) -> str | None:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        return f"is not a valid requirement ({str(exc).splitlines()[0]})"
    if req.url:
        return "must name a PyPI project, not a direct URL (the lock pins URLs itself)"
    return grammar.text_problem(value)


GIT_REF = Str("a git branch, tag or 40-hex commit", grammar.GIT_REF)
REPOSITORY = Str("a git repository URL (https://, ssh://, git:// or file://)",
                 grammar.REPOSITORY_URL)
TEXT = Str("a single line of text", free_text=True)
