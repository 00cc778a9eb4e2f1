"""What a site profile says by ROCm release (its ``rocm:`` section): the newest ROCm the
site's driver runs, and the variables and srun options that apply to some releases only.

A site's settings are not always right for every image: LUMI's GPU-direct level that
ROCm 6 images need hangs ROCm 7.0 ones, which need DMA-BUF off and a single-node VNI
instead. The profile says which releases each entry is for (a PEP 440 specifier such as
``<7`` or ``>=7``), and the image's ROCm picks the entries (``entries_for``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from imagebuild.recipe.fields import Obj, Seq, Str, Table

_ENV = Table(key=Str("an environment variable name", r"^[A-Za-z_][A-Za-z0-9_]*$"),
             value=Str("a string (quote numbers in YAML)", free_text=True), nullable=True)

SPEC = Obj(nullable=True, fields={
    "newest": Str("the newest ROCm release line the site's driver runs, like \"7.0\" "
                  "(quote it)", r"^\d+\.\d+(\.\d+)?$", nullable=True),
    "newest_why": Str("why, with its public source", free_text=True, nullable=True),
    "by_release": Seq(Obj(required=("when",), fields={
        "when": Str("the ROCm releases this entry applies to, a specifier like \"<7\" or "
                    "\">=7,<8\"", r"^[<>=!~0-9., ]+$"),
        "env": _ENV,
        "single_node_srun": Seq(Str("an srun option for single-node jobs, like "
                                    "--network=single_node_vni", r"^--[a-z-]+(=\S+)?$"),
                                nullable=True),
    }), nullable=True),
})


@dataclass(frozen=True)
class RocmEntry:
    """Settings for the ROCm releases ``when`` matches."""

    when: str
    env: tuple[tuple[str, str], ...] = ()
    single_node_srun: tuple[str, ...] = ()

    def applies(self, rocm: str) -> bool:
        return Version(rocm) in SpecifierSet(self.when)


@dataclass(frozen=True)
class RocmSettings:
    #: The newest release line the site runs ("7.0": any 7.0.x), None: no limit known.
    newest: str | None = None
    newest_why: str | None = None
    by_release: tuple[RocmEntry, ...] = ()

    def entries_for(self, rocm: str | None) -> tuple[RocmEntry, ...]:
        """The entries for an image of ``rocm`` (None: a CPU image or unknown: none)."""
        return tuple(e for e in self.by_release if rocm is not None and e.applies(rocm))

    def too_new(self, rocm: str | None) -> bool:
        """Whether ``rocm`` is newer than the newest line the site runs."""
        if rocm is None or self.newest is None:
            return False
        depth = len(self.newest.split("."))
        return Version(rocm).release[:depth] > Version(self.newest).release[:depth]


def parse_rocm(raw: Any, problem: Callable[[str, str], None]) -> RocmSettings:
    """The ``rocm:`` section, already checked against ``SPEC``; specifiers checked here."""
    if not isinstance(raw, dict):
        return RocmSettings()
    entries = []
    for index, item in enumerate(raw.get("by_release") or ()):
        if not isinstance(item, dict):
            continue
        when = str(item.get("when", ""))
        try:
            SpecifierSet(when)
        except InvalidSpecifier:
            problem(f"rocm.by_release.{index}.when",
                    f"{when!r} is not a version specifier like \"<7\" or \">=7,<8\"")
            continue
        env = item.get("env") or {}
        entries.append(RocmEntry(
            when=when, env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
            single_node_srun=tuple(item.get("single_node_srun") or ())))
    newest = raw.get("newest")
    try:
        if newest is not None:
            Version(str(newest))
    except InvalidVersion:
        problem("rocm.newest", f"{newest!r} is not a release like \"7.0\"")
        newest = None
    return RocmSettings(newest=str(newest) if newest is not None else None,
                        newest_why=raw.get("newest_why"), by_release=tuple(entries))
