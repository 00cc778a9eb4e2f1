"""RCCL's example tuner plugin: the recipe section and its rules, and its plan (the
rccl-tuner stage, its final-stage steps and environment, manifest, SBOM and size parts).
The recipe pins its source archive by sha256: the lock pins nothing for it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ComponentPlan,
    EnvVar,
    PlanContext,
    ProblemAt,
    ProjectFile,
    RecipeData,
    SectionData,
    Stage,
)
from imagebuild.components.shared import needs_rocm, refused_with_rocm_wheels, require_keys
from imagebuild.errors import RenderError, short_path
from imagebuild.lock.model import LockedArchive, PinnedSource
from imagebuild.recipe import grammar
from imagebuild.recipe.fields import Bool, Obj, Str
from imagebuild.recipe.image_network import below_floor
from imagebuild.recipe.model import Recipe

NAME = "rccl_tuner"


@dataclass(frozen=True)
class RcclTuner:
    """RCCL's example tuner plugin from a source archive pinned by sha256, built against
    the image's RCCL; ``interface_adapter`` adds the v4 interface RCCL 2.27 looks up."""

    enabled: bool
    url: str = ""
    sha256: str = ""
    example_dir: str = "ext-tuner/example"
    interface_adapter: bool = True
    #: A tuner configuration file, relative to the project; None: the image sets none.
    config: str | None = None

    def lock_inputs(self) -> dict[str, Any]:
        return {}  # the recipe pins the archive by its sha256: nothing to lock


def section(recipe: Recipe) -> RcclTuner | None:
    """The recipe's tuner section when it builds the tuner."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, RcclTuner) and found.enabled else None


SPEC = Obj(
    description="RCCL's example tuner plugin (ext-tuner/example: a CSV of algorithm, protocol "
                "and channels per collective and size range), from a source archive pinned by "
                "sha256: built against the image's RCCL into /opt/rccl-tuner, checked to "
                "export a tuner interface that RCCL looks up, and named by NCCL_TUNER_PLUGIN",
    fields={
        "enabled": Bool(),
        "url": Str("an http(s):// URL of a source archive with one top-level directory",
                   grammar.ARCHIVE_URL),
        "sha256": Str("the archive's sha256, 64 lowercase hex digits", grammar.SHA256),
        "example_dir": Str("the example's directory in the archive, below its top-level "
                           "directory, like ext-tuner/example", grammar.SUBDIR),
        "interface_adapter": Bool("true or false: also export ncclTunerPlugin_v4 (RCCL "
                                  "2.27's interface) from the example's v5 functions"),
        "config": Str("a tuner configuration in the project, like tuning/nccl_tuner.conf "
                      "(`imagebuild tune rccl --sweep-results` writes one): copied into the "
                      "image, which sets NCCL_TUNER_CONFIG_FILE to it", grammar.SUBDIR,
                      nullable=True),
    })
DEFAULTS = {"enabled": False, "example_dir": "ext-tuner/example", "interface_adapter": True}


def rules(tuner: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem, ": the plugin is checked against the image's RCCL")
    require_keys(NAME, tuner, ("url", "sha256"), problem)
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "the tuner stage checks the plugin against the base image's "
                             "RCCL (rocm_prefix), which such a base does not have")


def read(tuner: SectionData, recipe: RecipeData) -> RcclTuner:
    return RcclTuner(enabled=tuner["enabled"], url=tuner.get("url", ""),
                     sha256=tuner.get("sha256", ""), example_dir=tuner["example_dir"],
                     interface_adapter=tuner["interface_adapter"], config=tuner.get("config"))


def project_files(tuner: RcclTuner) -> tuple[ProjectFile, ...]:
    """The tuner configuration the recipe names, copied into the image."""
    if tuner.config is None:
        return ()
    return (ProjectFile(f"{NAME}.config", tuner.config,
                        "a path relative to the project, like tuning/nccl_tuner.conf; "
                        "`imagebuild tune rccl --sweep-results` writes one"),)


FOLDER = Path(__file__).resolve().parent
#: The tuner plugin's install tree: lib/ the plugin, bin/ its probe, the check's record.
PREFIX = "/opt/rccl-tuner"
#: The build-time check that RCCL would load the tuner plugin, and the C sources the tuner
#: stage compiles (staged in the build context, bind-mounted into the stage).
CHECK = "tuner-plugin-check.py"
ADAPTER = "rccl-tuner-v4.c"
PROBE = "rccl-tuner-probe.c"
#: The variables RCCL reads for a tuner (src/plugin/tuner.cc) and the example reads for its
#: configuration (plugin.c): the image sets the first when the stage is on, the second when
#: the recipe names a configuration.
PLUGIN_ENV = "NCCL_TUNER_PLUGIN"
CONFIG_ENV = "NCCL_TUNER_CONFIG_FILE"
#: Where the build context stages the recipe's tuner configuration.
CONFIG_CONTEXT = "rccl-tuner.conf"
#: What the tuner stage needs beyond the recipe's build_packages: curl fetches the archive,
#: gcc compiles the plugin and the probe (plain C), readelf and python3 run its check.
BUILD_PACKAGES = ("gcc", "libc6-dev", "curl", "ca-certificates", "binutils", "python3")


@dataclass(frozen=True)
class RcclTunerPlan:
    url: str
    sha256: str
    #: The example's directory in the unpacked archive.
    source_dir: str
    interface_adapter: bool
    #: Where ROCm is: the RCCL whose lookups the check reads.
    rocm_prefix: str
    #: Whether the recipe names a configuration (copied into the image).
    configured: bool = False
    prefix: str = PREFIX
    check: str = CHECK
    adapter: str = ADAPTER
    probe_source: str = PROBE
    plugin_env: str = PLUGIN_ENV
    config_env: str = CONFIG_ENV
    config_context: str = CONFIG_CONTEXT

    @property
    def library_name(self) -> str:
        return "librccl-tuner.so"

    @property
    def library(self) -> str:
        return f"{self.prefix}/lib/{self.library_name}"

    @property
    def probe(self) -> str:
        return f"{self.prefix}/bin/rccl-tuner-probe"

    @property
    def record(self) -> str:
        return f"{self.prefix}/interface.json"

    @property
    def config(self) -> str | None:
        """The configuration's path in the image, when the recipe names one."""
        return f"{self.prefix}/nccl_tuner.conf" if self.configured else None



def planned(parts: Mapping[str, ComponentPlan]) -> RcclTunerPlan | None:
    """The tuner's plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    recipe, tuner = context.recipe, context.section
    # A network plugin release whose own tuner breaks beside another is refused here.
    plugins = [part.net_plugin for part in context.needed.values() if part.net_plugin]
    why = below_floor(plugins[0] if plugins else None, tuner=True)
    if why:
        raise RenderError(f"{short_path(recipe.path)}: rccl_tuner: {why}",
                          hint="use aws-ofi-nccl v1.20.0 or newer (v1.21.1) for "
                               "network_plugin.ref, or turn the tuner off")
    values = RcclTunerPlan(
        url=tuner.url, sha256=tuner.sha256,
        source_dir=f"/usr/src/rccl-tuner/{tuner.example_dir}",
        interface_adapter=tuner.interface_adapter, rocm_prefix=recipe.rocm_prefix,
        configured=tuner.config is not None)
    files = [(PROBE, (FOLDER / "probe.c").read_text())]
    if values.interface_adapter:
        files.append((ADAPTER, (FOLDER / "v4-adapter.c").read_text()))
    env = [EnvVar(PLUGIN_ENV, values.library, f"{NAME}.enabled is true (the built tuner's path)")]
    if tuner.config is not None:
        files.append((CONFIG_CONTEXT, context.inputs.files[tuner.config]))
        env.append(EnvVar(CONFIG_ENV, f"{values.config}",
                          f"{NAME}.config names the configuration"))
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("rccl-tuner", "stage.j2",
                    "toolchain + RCCL's example tuner plugin and its probe",
                    "tuner archive (url, sha256), interface adapter"),
        steps=("final.j2",), files=tuple(files), scripts=((CHECK, FOLDER / "check.py"),),
        build_packages=BUILD_PACKAGES,
        linked_files=(values.library, values.probe),
        path=(f"{PREFIX}/bin",),
        env=tuple(env),
        # "interface" (what RCCL looks up, what the tuner exports) is added by the final
        # stage's check.
        manifest={"enabled": True, "source": {"url": tuner.url, "sha256": tuner.sha256},
                  "interface_adapter": values.interface_adapter, "library": values.library,
                  "probe": values.probe, "config": values.config},
        sources=(PinnedSource(NAME, "rccl-tuner",
                              LockedArchive(tuner.url, tuner.sha256, size=0)),),
        sizes=((PREFIX, "RCCL tuner"),))


COMPONENT = Component(
    name=NAME, title="RCCL tuner", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, plan=plan,
    project_files=project_files,
    # Its plan judges the network plugin's release (a tuner beside an old plugin's).
    needs=("network_plugin",),
)
