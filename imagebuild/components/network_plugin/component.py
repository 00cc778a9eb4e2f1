"""The RCCL network plugin and its libfabric: the recipe section and its rules."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from imagebuild.components.protocol import (
    Component,
    ProblemAt,
    RecipeData,
    SectionData,
    git_source,
    needs_rocm,
    refused_with_rocm_wheels,
    require_keys,
)
from imagebuild.lock.model import ArchivePin, GitPin, Pin
from imagebuild.recipe import grammar
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.recipe.spec import GIT_REF, REPOSITORY, Bool, Obj, Str

NAME = "network_plugin"
PluginKind = Literal["aws-ofi-nccl", "aws-ofi-rccl"]
#: The keys of its sources in the lock's [tool.imagebuild.sources].
LOCK_KEY = "network-plugin"
LIBFABRIC_KEY = "libfabric"


@dataclass(frozen=True)
class Libfabric:
    version: str
    url: str


@dataclass(frozen=True)
class NetworkPlugin:
    enabled: bool
    kind: PluginKind
    source: GitSource
    libfabric: Libfabric

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: {"source": asdict(self.source), "libfabric": asdict(self.libfabric)}
                if self.enabled else None}


def section(recipe: Recipe) -> NetworkPlugin | None:
    """The recipe's network plugin section when it builds the plugin."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, NetworkPlugin) and found.enabled else None


def plugin_prefix(kind: str) -> str:
    """Where a plugin of ``kind`` is installed in the image."""
    return f"/opt/{kind}"


SPEC = Obj(fields={
    "enabled": Bool(),
    "kind": Str("aws-ofi-nccl or aws-ofi-rccl", enum=("aws-ofi-nccl", "aws-ofi-rccl")),
    "repository": REPOSITORY,
    "ref": GIT_REF,
    "libfabric": Obj(fields={
        "version": Str("a libfabric release like 2.1.0", grammar.VERSION_TEXT),
        "url": Str("an http(s):// URL of the release tarball; {version} is replaced",
                   grammar.ARCHIVE_URL),
    }),
})
DEFAULTS = {"enabled": False, "kind": "aws-ofi-nccl"}


def rules(plugin: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem)
    require_keys(NAME, plugin, ("repository", "ref"), problem)
    libfabric = plugin.get("libfabric") or {}
    require_keys(NAME, libfabric, ("version", "url"), problem, within=("libfabric",))
    if plugin["kind"] == "aws-ofi-rccl" and str(libfabric.get("version", "")).startswith("2."):
        # libfabric 2.0 dropped container_of from its public headers, which the fork's
        # sources still use: the build stops with "implicit declaration of function
        # 'container_of'" (ROCm/aws-ofi-rccl, branch cxi).
        problem((NAME, "libfabric", "version"),
                "aws-ofi-rccl does not compile against libfabric 2.x (it uses container_of, "
                "which libfabric 2 no longer defines); use a 1.x release such as 1.22.0, or "
                "kind aws-ofi-nccl")
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "the plugin stage compiles against ROCm in the base image "
                             "(rocm_prefix), not yet against the SDK's devel wheel; use a 7.x "
                             "recipe for multi-node Slingshot images")


def read(plugin: SectionData, recipe: RecipeData) -> NetworkPlugin:
    libfabric = plugin.get("libfabric") or {}
    version = libfabric.get("version", "")
    return NetworkPlugin(
        enabled=plugin["enabled"], kind=plugin["kind"], source=git_source(plugin),
        libfabric=Libfabric(version=version,
                            url=libfabric.get("url", "").replace("{version}", version)))


def pins(plugin: NetworkPlugin, recipe: Recipe) -> tuple[Pin, ...]:
    return (GitPin(LOCK_KEY, plugin.source), ArchivePin(LIBFABRIC_KEY, plugin.libfabric.url))


COMPONENT = Component(
    name=NAME, title="network plugin", folder=Path(__file__).resolve().parent,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins,
    always_recorded=True, needs_build_packages=True,
    precedes=(("final", "hipblaslt"),),
)
