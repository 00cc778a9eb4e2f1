"""The pinned wheels must agree with each other: what one pinned wheel requires of another
pinned project (its ``Requires-Dist``) must hold for that project's pin.

One ROCm release directory on repo.radeon.com holds several torch builds and torchvision
versions side by side (rocm-rel-7.0.2 has torchvision 0.23.0, built for torch 2.8, and 0.24.0,
built for torch 2.9); a recipe that pins two that were not built together gives an image
whose torchvision fails at import or at its first operator. An installer would refuse such a
set too, but only after every download and with a resolver trace that names no recipe key:
this check runs on the downloaded wheels before anything is resolved or written, and names
both pins and the wheel whose metadata says so.

Requirements are read from each wheel's own ``<name>-<version>.dist-info/METADATA`` (the
core metadata specification:
https://packaging.python.org/en/latest/specifications/core-metadata/) and judged as an
installer judges them: environment markers for the image's Python on linux x86_64, and PEP
440 version matching (https://peps.python.org/pep-0440/#version-matching), under which
``==2.8.0`` matches the local build ``2.8.0+rocm7.0.2.lw.git245bf6ed`` but
``==2.8.0+rocm7.0.2.lw.git245bf6ed`` matches that build only.
"""

from __future__ import annotations

import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from email.policy import compat32
from pathlib import Path

import yaml
from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from imagebuild.errors import LockError, display_path
from imagebuild.recipe.model import Recipe


@dataclass(frozen=True)
class PinnedWheel:
    """One pinned wheel, downloaded: the recipe's pin and the file that carries it."""

    name: str  # canonical project name
    version: str  # the pin, local label included
    filename: str
    path: Path


@dataclass(frozen=True)
class Disagreement:
    """``wheel``'s METADATA requires ``requirement`` of ``required``, whose pin fails it."""

    wheel: PinnedWheel
    requirement: str
    required: PinnedWheel


def target_environment(python: str) -> dict[str, str]:
    """Marker variables of the image (PEP 508): CPython ``python`` on linux x86_64, where
    repo.radeon.com's wheels run. Markers on the kernel release or version are not known
    before the image runs; they compare against an empty string."""
    parts = python.split(".")
    full = ".".join((parts + ["0", "0"])[:3])
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": "x86_64",
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(full.split(".")[:2]),
        "sys_platform": "linux",
        "extra": "",  # the pins are installed without extras
    }


def requires_dist(wheel: PinnedWheel) -> list[str]:
    """The ``Requires-Dist`` lines of the wheel's own METADATA, as written."""
    return metadata_field(wheel, "Requires-Dist")


def provides_extra(wheel: PinnedWheel) -> list[str]:
    """The extras the wheel declares (``Provides-Extra``, core metadata 2.1)."""
    return metadata_field(wheel, "Provides-Extra")


def metadata_field(wheel: PinnedWheel, field: str) -> list[str]:
    """Every value of one field of the wheel's own METADATA."""
    try:
        with zipfile.ZipFile(wheel.path) as archive:
            member = _metadata_member(archive.namelist(), wheel)
            data = archive.read(member)
    except (zipfile.BadZipFile, OSError) as exc:
        raise LockError(f"{wheel.filename}: not a readable wheel ({exc})",
                        hint="the index serves a damaged file; it is not cached, so "
                             "locking again downloads it again") from None
    headers = BytesHeaderParser(policy=compat32).parsebytes(data)
    # Folded header lines (a continuation starts with whitespace) are joined back.
    return [" ".join(line.split()) for line in headers.get_all(field) or []]


def _metadata_member(names: Sequence[str], wheel: PinnedWheel) -> str:
    """``<name>-<version>.dist-info/METADATA`` at the top of the archive (the wheel
    specification: https://packaging.python.org/en/latest/specifications/binary-distribution-format/)."""
    candidates = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    project = canonicalize_name(parse_wheel_filename(wheel.filename)[0])
    named = [n for n in candidates
             if canonicalize_name(n.split("/")[0].removesuffix(".dist-info")
                                  .rsplit("-", 1)[0]) == project]
    if len(named) == 1:
        return named[0]
    if len(candidates) == 1:
        return candidates[0]
    raise LockError(f"{wheel.filename}: not a valid wheel: "
                    f"{'no' if not candidates else 'more than one'} .dist-info/METADATA")


def find_disagreements(wheels: Sequence[PinnedWheel], python: str) -> list[Disagreement]:
    """Every requirement one pinned wheel states about another pinned project that the
    other's pin does not satisfy (requirements on projects the recipe does not pin are the
    resolver's business)."""
    pinned = {w.name: w for w in wheels}
    environment = target_environment(python)
    found = []
    for wheel in wheels:
        for line in requires_dist(wheel):
            try:
                requirement = Requirement(line)
            except InvalidRequirement as exc:
                reason = str(exc).splitlines()[0]
                raise LockError(f"{wheel.filename}: METADATA has an invalid Requires-Dist "
                                f"{line!r}: {reason}") from None
            required = pinned.get(canonicalize_name(requirement.name))
            if required is None or required is wheel or requirement.url:
                continue  # a direct URL names a file, not a version: nothing to compare
            if requirement.marker is not None and not _applies(requirement.marker,
                                                               environment):
                continue
            if not requirement.specifier.contains(Version(required.version), prereleases=True):
                found.append(Disagreement(wheel, line, required))
    return found


def _applies(marker: Marker, environment: dict[str, str]) -> bool:
    try:
        return marker.evaluate(environment)
    except (InvalidVersion, ValueError, TypeError):
        return True  # cannot be decided here: judge the requirement rather than skip it


def check_pins_agree(recipe: Recipe, wheels: Sequence[PinnedWheel]) -> None:
    """Raise LockError naming every pair of pins whose wheels disagree."""
    disagreements = find_disagreements(wheels, recipe.python)
    if not disagreements:
        return
    lines = ["the pinned wheels disagree with each other's Requires-Dist:"]
    for d in disagreements:
        lines.append(
            f"  {d.wheel.name} {d.wheel.version} ({pin_location(recipe, d.wheel.name)}) "
            f"requires `{d.requirement}` (Requires-Dist in the METADATA of "
            f"{d.wheel.filename}), but {d.required.name} is pinned to {d.required.version} "
            f"({pin_location(recipe, d.required.name)})")
    raise LockError("\n".join(lines), where=f"{display_path(recipe.path)}: wheels.packages",
                    hint="pin builds made for each other: the requirement names the build "
                         "the wheel was made for (one release directory often holds several "
                         "builds of torch and of its companions); nothing was written")


def pin_location(recipe: Recipe, name: str) -> str:
    """``file:line: wheels.packages.<name>`` of the pin, in the recipe or the parent that
    sets it (the child first, as ``extends:`` merges)."""
    wanted = canonicalize_name(name)
    for source in recipe.sources or (recipe.path,):
        line = _pin_line(source, wanted)
        if line is not None:
            return f"{display_path(source)}:{line}: wheels.packages.{name}"
    return f"{display_path(recipe.path)}: wheels.packages.{name}"


def _pin_line(source: Path, wanted: str) -> int | None:
    try:
        root = yaml.compose(source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None
    packages = _child(_child(root, "wheels"), "packages")
    if not isinstance(packages, yaml.MappingNode):
        return None
    for key_node, value in packages.value:
        if isinstance(key_node, yaml.ScalarNode) and canonicalize_name(key_node.value) == wanted \
                and not (isinstance(value, yaml.ScalarNode) and value.tag.endswith(":null")):
            return key_node.start_mark.line + 1
    return None


def _child(node: yaml.Node | None, key: str) -> yaml.Node | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return value
    return None
