"""The image's own Slingshot stack: HPE's open CXI user space (cassini-headers, the
cxi-driver's uapi headers, libcxi) and a libfabric with its cxi provider built against it,
pinned like every source (three git sources by commit, the libfabric archive by sha256).

CSCS builds its own images for Alps this way and runs them with the Container Engine's CXI
hook off, so the image's libfabric is used ("The CXI hook must be disabled such that the
container images network libraries have priority over the host system's libraries": Alps
Extended Images, https://github.com/eth-cscs/cscs-docs/blob/main/docs/software/alps-extended-images/index.md).
The sources: https://github.com/HewlettPackard/shs-cassini-headers, shs-cxi-driver and
shs-libcxi (tags release/shs-<version>), https://github.com/ofiwg/libfabric.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ComponentPlan,
    PlanContext,
    ProblemAt,
    ProvidedLibfabric,
    RecipeData,
    SectionData,
    Stage,
)
from imagebuild.components.shared import SOURCE_BUILD_PACKAGES, pinned_source, require_keys
from imagebuild.lock.model import ArchivePin, GitPin, Pin, PinnedSource
from imagebuild.recipe import grammar
from imagebuild.recipe.fields import GIT_REF, REPOSITORY, Bool, Obj, Seq, Str
from imagebuild.recipe.model import GitSource, Recipe

NAME = "cxi_stack"
#: The three HPE sources, in build order: (name in the section and under /usr/src/shs,
#: lock key).
PARTS = (("cassini-headers", "shs-cassini-headers"), ("cxi-driver", "shs-cxi-driver"),
         ("libcxi", "shs-libcxi"))
LIBFABRIC_KEY = "cxi-libfabric"


@dataclass(frozen=True)
class CxiStack:
    enabled: bool
    #: The git ref of all three HPE repositories (they are released together).
    ref: str
    repositories: tuple[tuple[str, str], ...]
    libfabric_version: str
    libfabric_url: str
    #: The base distribution's packages of the libraries it links (the names differ by
    #: release: libconfig9 or libconfig11, libcurl4 or libcurl4t64).
    runtime_packages: tuple[str, ...] = ()

    def source(self, name: str) -> GitSource:
        return GitSource(dict(self.repositories)[name], self.ref)

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: asdict(self)}


SPEC = Obj(
    description="HPE's CXI user space (cassini-headers, cxi-driver headers, libcxi) and a "
                "libfabric with its cxi provider, built into /opt/cxi-stack",
    fields={
        "enabled": Bool(),
        "ref": GIT_REF,
        "repositories": Obj(fields={name: REPOSITORY for name, _ in PARTS}),
        "libfabric": Obj(fields={
            "version": Str("a libfabric release like 2.6.0", grammar.VERSION_TEXT),
            "url": Str("an http(s):// URL of the release tarball; {version} is replaced",
                       grammar.ARCHIVE_URL),
        }),
        "runtime_packages": Seq(Str("an OS package of the base distribution, like libconfig9",
                                    grammar.OS_PACKAGE)),
    })
#: The packages of the libraries libcxi, its utilities and libfabric's cxi provider link,
#: on Ubuntu 24.04 (AMD's rocm/dev-ubuntu-24.04 bases); the final stage's ldd step proves
#: the list for libfabric and libcxi.
UBUNTU_24_04_RUNTIME = ("libconfig9", "libuv1t64", "libfuse2t64", "libyaml-0-2", "libnl-3-200",
                        "libnl-route-3-200", "libnuma1", "libsensors5", "libcurl4t64",
                        "libjson-c5")
DEFAULTS = {"enabled": False, "runtime_packages": list(UBUNTU_24_04_RUNTIME)}


def rules(stack: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    require_keys(NAME, stack, ("ref", "repositories", "libfabric"), problem)
    require_keys(NAME, stack.get("repositories") or {}, tuple(n for n, _ in PARTS), problem,
                 within=("repositories",))
    require_keys(NAME, stack.get("libfabric") or {}, ("version", "url"), problem,
                 within=("libfabric",))


def read(stack: SectionData, recipe: RecipeData) -> CxiStack:
    libfabric = stack.get("libfabric") or {}
    version = libfabric.get("version", "")
    repositories = stack.get("repositories") or {}
    return CxiStack(enabled=stack["enabled"], ref=stack.get("ref", ""),
                    repositories=tuple((n, repositories.get(n, "")) for n, _ in PARTS),
                    libfabric_version=version,
                    libfabric_url=libfabric.get("url", "").replace("{version}", version),
                    runtime_packages=tuple(stack.get("runtime_packages") or ()))


def pins(stack: CxiStack, recipe: Recipe) -> tuple[Pin, ...]:
    return (*(GitPin(key, stack.source(name)) for name, key in PARTS),
            ArchivePin(LIBFABRIC_KEY, stack.libfabric_url))


FOLDER = Path(__file__).resolve().parent
PREFIX = "/opt/cxi-stack"
RECORD = "/opt/imagebuild/cxi-stack.json"
CHECK = "cxi-stack-check.py"
#: What libcxi and libfabric's cxi provider compile against (the measured list of the
#: fixtures' README: libcxi's configure, and curl and json-c for the provider).
BUILD_PACKAGES = ("autoconf", "automake", "libtool", "pkg-config", "curl", "libconfig-dev",
                  "libuv1-dev", "libfuse-dev", "libyaml-dev", "libnl-3-dev",
                  "libnl-route-3-dev", "libnuma-dev", "libsensors-dev",
                  "libcurl4-openssl-dev", "libjson-c-dev")


@dataclass(frozen=True)
class SourcePlan:
    repository: str
    revision: str


@dataclass(frozen=True)
class CxiStackPlan:
    ref: str
    #: (name, its repository and revision), in build order.
    sources: tuple[tuple[str, SourcePlan], ...]
    libfabric_version: str
    libfabric_url: str
    libfabric_sha256: str | None
    prefix: str = PREFIX
    record: str = RECORD
    check: str = CHECK


def planned(parts: Mapping[str, ComponentPlan]) -> CxiStackPlan | None:
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    stack, lock = context.section, context.lock
    sources = []
    pinned: list[PinnedSource] = []
    for name, key in PARTS:
        locked = lock.git(key) if lock else None
        repository, revision = pinned_source(stack.source(name), locked)
        sources.append((name, SourcePlan(repository, revision)))
        if locked:
            pinned.append(PinnedSource(NAME, name, locked))
    archive = lock.archive(LIBFABRIC_KEY) if lock else None
    if archive:
        pinned.append(PinnedSource(NAME, "libfabric", archive, stack.libfabric_version))
    values = CxiStackPlan(ref=stack.ref, sources=tuple(sources),
                          libfabric_version=stack.libfabric_version,
                          libfabric_url=archive.url if archive else stack.libfabric_url,
                          libfabric_sha256=archive.sha256 if archive else None)
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("cxi-stack", "stage.j2", "toolchain + libcxi + libfabric with cxi",
                    "the CXI sources' commits, libfabric archive"),
        steps=("final.j2",), scripts=((CHECK, FOLDER / "check.py"),),
        build_packages=SOURCE_BUILD_PACKAGES + BUILD_PACKAGES,
        runtime_packages=stack.runtime_packages,
        loader_dirs=(("cxi-stack", f"{PREFIX}/lib"),),
        linked_files=(f"{PREFIX}/lib/libfabric.so.1", f"{PREFIX}/lib/libcxi.so.1"),
        manifest={"enabled": True, "prefix": PREFIX, "ref": stack.ref,
                  "libfabric": stack.libfabric_version,
                  "commits": {name: s.revision for name, s in sources} if lock else None},
        sources=tuple(pinned),
        sizes=((PREFIX, "CXI stack + libfabric"),),
        libfabric=ProvidedLibfabric(PREFIX, stack.libfabric_version, ("cxi",), "cxi-stack"))


COMPONENT = Component(
    name=NAME, title="CXI stack", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
    needs_build_packages=False,
)
