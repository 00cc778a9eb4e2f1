"""Test helpers for the Dockerfile renderer: realistic locks, and a Dockerfile stage parser.

``write_lock`` writes a lock the way ``imagebuild lock`` does (PEP 751 body, the
``[tool.imagebuild]`` table, the provenance header) from made-up but well-formed pins,
so tests can render locked Dockerfiles for recipes that cannot be locked here.
``parse_dockerfile`` splits rendered text into stages with their instructions and the
stages they depend on (FROM, COPY --from= and RUN --mount=...,from=), for the cache-behaviour
tests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import tomli_w

from imagebuild import components
from imagebuild.lock.check import current_lock
from imagebuild.lock.epoch import relock_text
from imagebuild.lock.lockfile import header, lock_path, lock_text, read_lock, tool_table
from imagebuild.lock.model import ArchivePin, GitPin, Lock, LockedArchive, LockedGit, LockedSource
from imagebuild.recipe.model import Recipe
from imagebuild.render.plan import BuildPlan, plan_for


def fake_sha(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def fake_commit(*parts: str) -> str:
    return fake_sha(*parts)[:40]


#: Transitive dependencies a torch install pulls from PyPI (realistic names and versions).
PYPI_DEPENDENCIES = (("filelock", "3.20.0"), ("fsspec", "2025.9.0"), ("jinja2", "3.1.6"),
                     ("markupsafe", "3.0.3"), ("mpmath", "1.3.0"), ("networkx", "3.5"),
                     ("sympy", "1.14.0"), ("typing-extensions", "4.15.0"))


#: The made-up locks' SOURCE_DATE_EPOCH (2026-01-01): fixed, so their renders are too.
FAKE_EPOCH = 1_767_225_600


def write_lock(recipe: Recipe, path: Path | None = None) -> Lock:
    """Write a well-formed lock for ``recipe`` (pins derived from the recipe's values)."""
    py = recipe.python.replace(".", "")
    packages = []
    for name, version in recipe.wheels.pinned:
        filename = f"{name.replace('-', '_')}-{version}-cp{py}-cp{py}-linux_x86_64.whl"
        packages.append(_package(name, version, recipe.wheels.index_url + quote(filename)))
    for name, version in PYPI_DEPENDENCIES:
        filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
        url = f"https://files.pythonhosted.org/packages/{fake_sha(name)[:2]}/{filename}"
        packages.append(_package(name, version, url))
    packages.sort(key=lambda p: p["name"])

    base_digest = "sha256:" + fake_sha(recipe.base_image)
    target = path or lock_path(recipe)
    target.write_text(lock_text(recipe, packages, base_digest=base_digest,
                                wheel_index=recipe.wheels.index_url,
                                sources=fake_sources(recipe), source_date_epoch=FAKE_EPOCH),
                      encoding="utf-8")
    return read_lock(target)


def fake_sources(recipe: Recipe) -> dict[str, LockedSource]:
    """What the lock pins for each enabled component's git sources and archives: the ref's
    made-up commit, the archive's made-up sha256."""
    sources: dict[str, LockedSource] = {}
    for component, section in components.enabled(recipe):
        for pin in component.pins(section, recipe):
            if isinstance(pin, GitPin):
                sources[pin.key] = LockedGit(pin.source.repository, pin.source.ref,
                                             fake_commit(pin.source.repository, pin.source.ref))
            elif isinstance(pin, ArchivePin):
                sources[pin.key] = LockedArchive(pin.url, fake_sha(pin.url), 7_654_321)
    return sources


def _package(name: str, version: str, url: str) -> dict:
    return {"name": name, "version": version,
            "wheels": [{"url": url, "size": 1000 + len(url),
                        "hashes": {"sha256": fake_sha(name, version)}}]}


# --- Dockerfile parsing ---------------------------------------------------------------------

@dataclass
class Stage:
    name: str
    base: str
    instructions: list[str] = field(default_factory=list)
    #: Stages this one reads from: its FROM parent and every --from= of COPY/RUN --mount.
    uses: set[str] = field(default_factory=set)

    @property
    def text(self) -> str:
        return "\n".join(self.instructions)


def instructions(text: str) -> list[str]:
    """Instructions with continuation lines joined; comments and blank lines dropped."""
    result: list[str] = []
    current = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):
            continue  # a comment line inside a continued instruction is dropped by BuildKit
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        result.append(current + line)
        current = ""
    assert not current, "Dockerfile ends inside a continued instruction"
    return result


def parse_dockerfile(text: str) -> dict[str, Stage]:
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for instruction in instructions(text):
        keyword = instruction.split(None, 1)[0].upper()
        if keyword == "FROM":
            match = re.match(r"FROM\s+(\S+)\s+AS\s+(\S+)$", instruction, re.IGNORECASE)
            assert match, f"FROM without a stage name: {instruction}"
            base, name = match.groups()
            stage = Stage(name, base)
            if base in stages:
                stage.uses.add(base)
            stages[name] = stage
            continue
        assert stage is not None, f"instruction before FROM: {instruction}"
        stage.instructions.append(instruction)
        stage.uses.update(stages_read(instruction))
    return stages


#: COPY --from=STAGE, and RUN --mount=type=bind,from=STAGE (a read-only mount of a stage).
_READS = re.compile(r"(?:--|,)from=([A-Za-z0-9_.-]+)")


def stages_read(instruction: str) -> list[str]:
    return _READS.findall(instruction)


def depends_on(stages: dict[str, Stage], name: str) -> set[str]:
    """Every stage ``name`` reads from, directly or through other stages."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for used in stages[todo.pop()].uses:
            if used in stages and used not in seen:
                seen.add(used)
                todo.append(used)
    return seen


def rewrite_lock(recipe: Recipe, template: Path, base_digest: str,
                 urls: dict[str, str] | None = None, path: Path | None = None) -> Lock:
    """Copy the lock ``template`` for ``recipe``: its input hash, base image and digest,
    and wheel URLs replaced per ``urls`` (package name -> URL); every hash kept."""
    import tomllib

    document = tomllib.loads(template.read_text(encoding="utf-8"))
    for package in document["packages"]:
        if urls and package["name"] in urls:
            package["wheels"][0]["url"] = urls[package["name"]]
    tool = document["tool"]["imagebuild"]
    tool.update(tool_table(recipe, base_digest, {}))
    tool["wheel-index"] = recipe.wheels.index_url
    target = path or lock_path(recipe)
    target.write_text(header(recipe) + tomli_w.dumps(document), encoding="utf-8")
    return read_lock(target)


# --- cache model ----------------------------------------------------------------------------

def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _content_digest(path: Path) -> str:
    """What BuildKit's cache key sees of a context path: names, modes and bytes."""
    if path.is_dir():
        entries = sorted(p for p in path.rglob("*") if p.is_file())
        return _digest(*(f"{p.relative_to(path)}:{p.stat().st_mode:o}:{_content_digest(p)}"
                         for p in entries))
    if not path.exists():
        return "missing"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def context_sources(instruction: str) -> list[str]:
    """Context paths an instruction reads: bind-mount sources and COPY sources."""
    sources = []
    for options in re.findall(r"--mount=(\S+)", instruction):
        fields = dict(f.split("=", 1) for f in options.split(",") if "=" in f)
        if fields.get("type") == "bind" and "from" not in fields:
            sources.append(fields["source"])
    words = instruction.split()
    if words[0].upper() == "COPY" and not any(w.startswith("--from=") for w in words):
        sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def cache_keys(text: str, context: Path | None = None,
               build_args: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """A model of BuildKit's cache keys: stage -> one key per instruction, chained.

    A step's key covers its parent's key, its own text, the keys of the stages it reads
    (--from=) and the content of the context files it reads (bind mounts, COPY; not their
    mtimes), which is what decides whether BuildKit reuses it. Without ``context`` only the
    names count. A RUN also sees the values of the build args its stage declared before it
    (``ARG NAME``): BuildKit puts them in the step's environment, so in its key. A COPY
    --from sees what it copies, not how it was made: its content, whose checksum leaves
    mtimes out, so here the stage's key without build args (they only date files).
    """
    args = dict(build_args or {})
    content = cache_keys(text, context) if args else None
    keys: dict[str, list[str]] = {}
    for name, stage in parse_dockerfile(text).items():
        parent = keys[stage.base][-1] if stage.base in keys else f"image {stage.base}"
        chain = [_digest(parent)]
        declared: dict[str, str] = {}
        for instruction in stage.instructions:
            parts = [chain[-1], instruction]
            words = instruction.split()
            if words[0].upper() == "ARG":
                arg, _, default = words[1].partition("=")
                declared[arg] = args.get(arg, default)
            elif words[0].upper() == "RUN":
                parts += [f"{arg}={value}" for arg, value in sorted(declared.items())]
            # A COPY --from and a read-only bind mount of a stage are keyed on the content
            # they read (BuildKit checksums it, mtimes left out), as COPY --from is.
            copied = content if content is not None and (
                words[0].upper() == "COPY" or "--mount=" in instruction) else keys
            parts += [copied[used][-1] for used in stages_read(instruction) if used in keys]
            for source in context_sources(instruction):
                parts.append(_content_digest(context / source) if context else source)
            chain.append(_digest(*parts))
        keys[name] = chain
    return keys


def rebuilt(before: dict[str, list[str]], after: dict[str, list[str]]) -> set[str]:
    """Stages whose result differs (their last key changed)."""
    return {name for name in after if before.get(name, [None])[-1] != after[name][-1]}


def first_changed(before: list[str], after: list[str]) -> int | None:
    """Index (1 = first instruction after FROM) of the first re-run step of a stage."""
    for index, (old, new) in enumerate(zip(before, after)):
        if old != new:
            return index
    return None if len(before) == len(after) else min(len(before), len(after))


def served_lock(recipe: Recipe, server, wheels: list[tuple[str, str]], base_digest: str,
                path: Path | None = None, payload_size: int = 0) -> Lock:
    """Make small pure wheels in ``server``'s directory and lock ``recipe`` to them.

    ``server`` is a tests.support.indexserver.IndexServer; the lock's URLs point at it, so
    its request log shows every file an installer fetched.
    """
    from tests.support.indexserver import make_wheel, sha256_of

    packages = []
    for name, version in wheels:
        wheel = make_wheel(server.directory, name, version, python_tag="py3", platform="any",
                           payload_size=payload_size)
        packages.append({"name": name, "version": version, "wheels": [{
            "url": server.url_for(wheel.name), "size": wheel.stat().st_size,
            "hashes": {"sha256": sha256_of(wheel)}}]})
    target = path or lock_path(recipe)
    # Re-locking the same pins keeps the lock's time, as `imagebuild lock` does: an unchanged
    # rebuild stays fully cached.
    target.write_text(relock_text(target, lambda epoch: lock_text(
        recipe, packages, base_digest=base_digest, wheel_index=recipe.wheels.index_url,
        source_date_epoch=epoch)), encoding="utf-8")
    return read_lock(target)


def committed_plan(recipe: Recipe) -> BuildPlan:
    """The plan ``imagebuild render`` makes: the recipe with its committed lock, if any."""
    return plan_for(recipe, current_lock(recipe))
