"""The RCCL network plugin and the libfabric it is built against: the recipe section and its
rules, what the lock pins for it, and its plan (the plugin stage, its final-stage steps,
manifest, SBOM and size parts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from imagebuild.components.network_plugin.libfabric import LibfabricTarget, libfabric_target
from imagebuild.components.protocol import (
    Component,
    ComponentPlan,
    EnvVar,
    PlanContext,
    ProblemAt,
    RecipeData,
    SectionData,
    Stage,
)
from imagebuild.components.shared import (
    git_source,
    image_libfabric,
    needs_rocm,
    pinned_source,
    rccl_loading,
    refused_with_rocm_wheels,
    require_keys,
)
from imagebuild.errors import RenderError, short_path
from imagebuild.lock.model import ArchivePin, GitPin, LockedArchive, LockedGit, Pin, PinnedSource
from imagebuild.recipe import grammar
from imagebuild.recipe.fields import GIT_REF, REPOSITORY, Bool, Obj, Str
from imagebuild.recipe.image_network import (
    PROTOCOL_VARIABLES,
    NetPlugin,
    below_floor,
    release_tuple,
)
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.recipe.site import SiteProfile

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
    if not _on_cxi_stack(recipe):
        require_keys(NAME, libfabric, ("version", "url"), problem, within=("libfabric",))
    if plugin["kind"] == "aws-ofi-rccl" and _on_cxi_stack(recipe):
        problem((NAME, "kind"), "aws-ofi-rccl does not compile against libfabric 2.x (it uses "
                "container_of, which libfabric 2 no longer defines), and the cxi_stack "
                "section builds libfabric 2.x; use kind aws-ofi-nccl")
    elif plugin["kind"] == "aws-ofi-rccl" and str(libfabric.get("version", "")).startswith("2."):
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


def _on_cxi_stack(recipe: RecipeData | Recipe) -> bool:
    """The recipe builds the image's own Slingshot stack (the cxi_stack section): the plugin
    is built against that libfabric, and its own libfabric section is not used."""
    if isinstance(recipe, Recipe):
        stack = recipe.components.get("cxi_stack")
        return stack is not None and stack.enabled
    return bool((recipe.get("cxi_stack") or {}).get("enabled"))


def built_against(plugin: NetworkPlugin, recipe: Recipe) -> str:
    """The libfabric release the plugin links: the CXI stack's where the recipe builds one,
    else its own section's."""
    stack = recipe.components.get("cxi_stack")
    version = getattr(stack, "libfabric_version", None) if _on_cxi_stack(recipe) else None
    return version or plugin.libfabric.version


def read(plugin: SectionData, recipe: RecipeData) -> NetworkPlugin:
    libfabric = plugin.get("libfabric") or {}
    version = libfabric.get("version", "")
    return NetworkPlugin(
        enabled=plugin["enabled"], kind=plugin["kind"], source=git_source(plugin),
        libfabric=Libfabric(version=version,
                            url=libfabric.get("url", "").replace("{version}", version)))


def pins(plugin: NetworkPlugin, recipe: Recipe) -> tuple[Pin, ...]:
    if _on_cxi_stack(recipe):
        return (GitPin(LOCK_KEY, plugin.source),)
    return (GitPin(LOCK_KEY, plugin.source), ArchivePin(LIBFABRIC_KEY, plugin.libfabric.url))


FOLDER = Path(__file__).resolve().parent
LIBFABRIC_PREFIX = "/opt/libfabric"
#: The plugin stage's measurements (ELF symbol versions, RUNPATH), merged into the manifest
#: by the final stage.
RECORD = "/opt/imagebuild/network-plugin.json"  # in imagebuild.render.layout.IMAGE_ROOT
CHECK = "network-plugin-check.py"
#: Shared libraries the plugin links besides libfabric (aws-ofi-nccl requires hwloc).
RUNTIME_PACKAGES = ("libhwloc15",)


@dataclass(frozen=True)
class PluginPlan:
    kind: str
    repository: str
    revision: str
    ref: str
    prefix: str
    libfabric_version: str
    libfabric_url: str
    #: None when unlocked: the rendered step then refuses to run.
    libfabric_sha256: str | None
    libfabric_prefix: str
    #: Where ROCm's HIP and RCCL are (headers and libraries) for configure.
    rocm_prefix: str
    #: The oldest libfabric the plugin must load with, from the recipe's sites.
    libfabric_target: LibfabricTarget
    #: The RCCL whose lookups the check reads: the pinned one (``rccl:``, mounted from its
    #: stage) or the base image's, under rocm_prefix.
    rccl_where: str = ""
    rccl_stage: str | None = None
    #: What the plugin stage measured about the plugin (ELF symbol versions, RUNPATH),
    #: merged into the manifest by the final stage.
    record: str = RECORD
    #: The release the ref names (v1.21.1 -> "1.21.1"); None for a branch.
    release: str | None = None
    #: The stage that built the libfabric it links (the CXI stack's), which the plugin stage
    #: is built on; None: the plugin stage builds its own libfabric from the archive.
    libfabric_stage: str | None = None

    @property
    def library(self) -> str:
        return f"{self.prefix}/lib/librccl-net.so"



def planned(parts: Mapping[str, ComponentPlan]) -> PluginPlan | None:
    """The network plugin's plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    recipe, plugin, lock = context.recipe, context.section, context.lock
    locked = lock.git(LOCK_KEY) if lock else None
    own = image_libfabric(context)
    archive = lock.archive(LIBFABRIC_KEY) if lock and own is None else None
    repository, revision = pinned_source(plugin.source, locked)
    rccl_where, rccl_stage = rccl_loading(context)
    version = own.version if own else plugin.libfabric.version
    values = PluginPlan(
        kind=plugin.kind, repository=repository, revision=revision, ref=plugin.source.ref,
        prefix=plugin_prefix(plugin.kind), libfabric_version=version,
        libfabric_url=archive.url if archive else plugin.libfabric.url,
        libfabric_sha256=archive.sha256 if archive else None,
        libfabric_prefix=own.prefix if own else LIBFABRIC_PREFIX, rocm_prefix=recipe.rocm_prefix,
        libfabric_target=libfabric_target(short_path(recipe.path), version,
                                          context.inputs.sites, own.providers if own else ()),
        rccl_where=rccl_where, rccl_stage=rccl_stage,
        release=plugin.source.ref.lstrip("v") if release_tuple(plugin.source.ref) else None,
        libfabric_stage=own.stage if own else None)
    net_plugin = NetPlugin(
        kind=plugin.kind, library=values.library, release=values.release, libfabric=version,
        providers=own.providers if own else ())
    _refuse_below_floor(recipe, net_plugin, context.inputs.sites)
    sources: tuple[PinnedSource, ...] = (PinnedSource(NAME, plugin.kind, locked),) if locked else ()
    if archive:
        sources += (PinnedSource(NAME, "libfabric", archive, plugin.libfabric.version),)
    built_on = f"{own.stage} (its libfabric)" if own else "toolchain + libfabric"
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("plugin", "stage.j2", f"{built_on} + {plugin.kind}",
                    "plugin repository/commit" if own
                    else "libfabric archive, plugin repository/commit"),
        steps=("final.j2",), scripts=((CHECK, FOLDER / "check.py"),),
        runtime_packages=RUNTIME_PACKAGES,
        library_path=(f"{values.prefix}/lib",),
        # Found through the loader cache, which LD_LIBRARY_PATH overrides: a site that puts
        # its own libfabric on LD_LIBRARY_PATH (LUMI) wins. The CXI stack registers its own.
        loader_dirs=() if own else (("libfabric", f"{LIBFABRIC_PREFIX}/lib"),),
        linked_files=(values.library,),
        # RCCL dlopens NCCL_NET_PLUGIN's value as given before any default name (src/net.cc,
        # openNetPluginLib): the absolute path loads exactly this plugin.
        env=(EnvVar("NCCL_NET_PLUGIN", values.library),),
        manifest=_manifest(values, plugin, recipe.sites, locked, archive),
        sources=sources,
        sizes=((values.prefix, "network plugin + libfabric"),) + (
            () if own else ((LIBFABRIC_PREFIX, "network plugin + libfabric"),)),
        net_plugin=net_plugin)


def _refuse_below_floor(recipe: Recipe, plugin: NetPlugin, sites: tuple[SiteProfile, ...]
                        ) -> None:
    """A plugin release with known breakage where the recipe or one of its sites sets
    NCCL_PROTO/NCCL_ALGO is refused at plan time (every build and render makes the plan)."""
    variables = {key: "recipe env" for key, _ in recipe.env}
    for site in sites:
        entries = site.rocm.entries_for(recipe.rocm)
        for key in (*dict(site.container.env), *dict(site.env),
                    *(k for e in entries for k, _ in e.env)):
            variables.setdefault(key, f"site {site.name} ({site.source})")
    why = below_floor(plugin, variables=variables)
    if why:
        where = ", ".join(sorted({variables[k] for k in PROTOCOL_VARIABLES if k in variables}))
        raise RenderError(f"{short_path(recipe.path)}: network_plugin.ref: {why}; set by {where}",
                          hint="use aws-ofi-nccl v1.20.0 or newer (v1.21.1), or unset the "
                               "variables")


def _manifest(values: PluginPlan, plugin: NetworkPlugin, sites: tuple[str, ...],
              locked: LockedGit | None, archive: LockedArchive | None) -> dict[str, Any]:
    """Its source and where it is; "elf" (what the plugin stage read from the ELF) is filled
    in by the final stage."""
    if locked is None or (archive is None and values.libfabric_stage is None):
        return {"enabled": True}
    target = values.libfabric_target
    libfabric: dict[str, Any] = (
        {"version": values.libfabric_version, "from": values.libfabric_stage,
         "prefix": values.libfabric_prefix} if archive is None
        else {"version": plugin.libfabric.version, "url": archive.url,
              "sha256": archive.sha256, "prefix": LIBFABRIC_PREFIX})
    return {
        "enabled": True, "kind": plugin.kind, "repository": locked.repository,
        "ref": locked.ref, "commit": locked.commit, "prefix": values.prefix,
        "library": values.library, "libfabric": libfabric,
        "loads_with": {"oldest_libfabric": target.oldest_release, "from": target.oldest_from,
                       "max_symbol_version": target.max_abi, "sites": list(sites)},
        "elf": None,
    }


COMPONENT = Component(
    name=NAME, title="network plugin", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
    always_recorded=True, needs_build_packages=True, needs=("cxi_stack", "rccl"),
    precedes=(("final", "hipblaslt"),),
)
