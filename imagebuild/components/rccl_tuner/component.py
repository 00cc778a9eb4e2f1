"""RCCL's example tuner plugin: the recipe section and its rules, and its plan (the
rccl-tuner stage, its final-stage steps and environment, manifest, SBOM and size parts).
Its source is RCCL's repository at a release tag, which the lock pins to a commit; the
stage checks out the example's directory only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
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
from imagebuild.components.shared import (
    needs_rocm,
    pinned_source,
    rccl_loading,
    refused_with_rocm_wheels,
    require_keys,
)
from imagebuild.errors import RenderError, short_path
from imagebuild.lock.model import GitPin, Pin, PinnedSource
from imagebuild.recipe import grammar
from imagebuild.recipe.fields import REPOSITORY, Bool, Obj, Str
from imagebuild.recipe.image_network import below_floor
from imagebuild.recipe.model import GitSource, Recipe

NAME = "rccl_tuner"
#: Its source's key in the lock's [tool.imagebuild.sources].
LOCK_KEY = "rccl-tuner"


@dataclass(frozen=True)
class RcclTuner:
    """RCCL's example tuner plugin from RCCL's repository at a commit the lock pins, built
    against the image's RCCL; ``interface_adapter`` adds the v4 interface RCCL 2.27 looks
    up."""

    enabled: bool
    source: GitSource
    example_dir: str = "ext-tuner/example"
    interface_adapter: bool = True
    #: A tuner configuration file, relative to the project; None: the image sets none.
    config: str | None = None

    def lock_inputs(self) -> dict[str, Any]:
        return {NAME: asdict(self.source)}


def section(recipe: Recipe) -> RcclTuner | None:
    """The recipe's tuner section when it builds the tuner."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, RcclTuner) and found.enabled else None


SPEC = Obj(
    description="RCCL's example tuner plugin (ext-tuner/example: a CSV of algorithm, protocol "
                "and channels per collective and size range), from RCCL's repository at a "
                "commit the lock pins (a sparse checkout of the example's directory): built "
                "against the image's RCCL into /opt/rccl-tuner, checked to export a tuner "
                "interface that RCCL looks up, and named by NCCL_TUNER_PLUGIN",
    fields={
        "enabled": Bool(),
        "repository": REPOSITORY,
        "ref": Str("a git branch, tag or 40-hex commit; default rocm-<rocm>, the tag RCCL "
                   "gives each ROCm release", grammar.GIT_REF),
        "example_dir": Str("the example's directory in the repository, like "
                           "ext-tuner/example", grammar.SUBDIR),
        "interface_adapter": Bool("true or false: an example that exports "
                                  "ncclTunerPlugin_v5 only also gets ncclTunerPlugin_v4 (RCCL "
                                  "2.27's interface) from its v5 functions; one that exports "
                                  "v4 is built as it is"),
        "config": Str("a tuner configuration in the project, like tuning/nccl_tuner.conf "
                      "(`imagebuild tune rccl --sweep-results` writes one): copied into the "
                      "image, which sets NCCL_TUNER_CONFIG_FILE to it", grammar.SUBDIR,
                      nullable=True),
    })
DEFAULTS = {"enabled": False, "example_dir": "ext-tuner/example", "interface_adapter": True}


def rules(tuner: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem, ": the plugin is checked against the image's RCCL")
    require_keys(NAME, tuner, ("repository",), problem)
    if ".." in tuner["example_dir"].split("/"):
        problem((NAME, "example_dir"), f"{tuner['example_dir']!r} leaves the repository")
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "the tuner stage checks the plugin against the base image's "
                             "RCCL (rocm_prefix), which such a base does not have")


def read(tuner: SectionData, recipe: RecipeData) -> RcclTuner:
    ref = tuner.get("ref") or f"rocm-{recipe['rocm']}"
    return RcclTuner(enabled=tuner["enabled"],
                     source=GitSource(tuner.get("repository", ""), ref),
                     example_dir=tuner["example_dir"],
                     interface_adapter=tuner["interface_adapter"], config=tuner.get("config"))


def pins(tuner: RcclTuner, recipe: Recipe) -> tuple[Pin, ...]:
    return (GitPin(LOCK_KEY, tuner.source),)


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
#: Builds the example behind the adapter or as it is, by what its plugin.c exports.
BUILD_SCRIPT = "rccl-tuner-build.sh"
PROBE = "rccl-tuner-probe.c"
#: The variables RCCL reads for a tuner (src/plugin/tuner.cc) and the example reads for its
#: configuration (plugin.c): the image sets the first when the stage is on, the second when
#: the recipe names a configuration.
PLUGIN_ENV = "NCCL_TUNER_PLUGIN"
CONFIG_ENV = "NCCL_TUNER_CONFIG_FILE"
#: The v4 adapter's recording switch (v4-adapter.c): a directory for tuner-<host>-<pid>.csv.
RECORD_ENV = "IMAGEBUILD_TUNER_RECORD"
#: Where the build context stages the recipe's tuner configuration.
CONFIG_CONTEXT = "rccl-tuner.conf"
#: What the tuner stage needs beyond the recipe's build_packages: git fetches the source,
#: gcc compiles the plugin and the probe (plain C), readelf and python3 run its check.
BUILD_PACKAGES = ("gcc", "libc6-dev", "git", "ca-certificates", "binutils", "python3")
#: Where the stage checks the repository out.
CHECKOUT = "/usr/src/rccl-tuner"


def edf_notes(tuner: RcclTuner) -> tuple[str, ...]:
    """How a job reaches the tuner, as `imagebuild tune rccl` expects: where its config is
    read from, and the switch that records what RCCL asks it (--records DIR)."""
    config = (f"{PREFIX}/nccl_tuner.conf (the recipe's)" if tuner.config is not None else
              "none (RCCL keeps its own choices)")
    plugin = f"RCCL tuner: the image sets {PLUGIN_ENV}={PREFIX}/lib/librccl-tuner.so"
    bundle = f"a tuning bundle's EDF (`imagebuild tune edf`) sets {CONFIG_ENV} to its"
    record = f'To record the sizes RCCL asks it about, add {RECORD_ENV} = "DIR" to [env];'
    return (f"{plugin}; {CONFIG_ENV}: {config};",
            f"  {bundle} nccl_tuner.conf.",
            f"  {record} then `imagebuild tune rccl --records DIR`.")


@dataclass(frozen=True)
class RcclTunerPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    #: The example's directory in the repository (the sparse checkout's only directory).
    example_dir: str
    interface_adapter: bool
    #: The RCCL whose lookups the check reads: the pinned one (``rccl:``, mounted from its
    #: stage) or the base image's, under rocm_prefix.
    rccl_where: str
    rccl_stage: str | None = None
    #: Whether the recipe names a configuration (copied into the image).
    configured: bool = False
    prefix: str = PREFIX
    check: str = CHECK
    adapter: str = ADAPTER
    build_script: str = BUILD_SCRIPT
    probe_source: str = PROBE
    plugin_env: str = PLUGIN_ENV
    config_env: str = CONFIG_ENV
    config_context: str = CONFIG_CONTEXT
    checkout: str = CHECKOUT

    @property
    def source_dir(self) -> str:
        return f"{self.checkout}/{self.example_dir}"

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
    recipe, tuner, lock = context.recipe, context.section, context.lock
    # A network plugin release whose own tuner breaks beside another is refused here.
    plugins = [part.net_plugin for part in context.needed.values() if part.net_plugin]
    why = below_floor(plugins[0] if plugins else None, tuner=True)
    if why:
        raise RenderError(f"{short_path(recipe.path)}: rccl_tuner: {why}",
                          hint="use aws-ofi-nccl v1.20.0 or newer (v1.21.1) for "
                               "network_plugin.ref, or turn the tuner off")
    locked = lock.git(LOCK_KEY) if lock else None
    repository, revision = pinned_source(tuner.source, locked)
    rccl_where, rccl_stage = rccl_loading(context)
    values = RcclTunerPlan(
        repository=repository, revision=revision, ref=tuner.source.ref,
        example_dir=tuner.example_dir,
        interface_adapter=tuner.interface_adapter, rccl_where=rccl_where,
        rccl_stage=rccl_stage,
        configured=tuner.config is not None)
    files = [(PROBE, (FOLDER / "probe.c").read_text())]
    if values.interface_adapter:
        files.append((ADAPTER, (FOLDER / "v4-adapter.c").read_text()))
        files.append((BUILD_SCRIPT, (FOLDER / "tuner-build.sh").read_text()))
    env = [EnvVar(PLUGIN_ENV, values.library, f"{NAME}.enabled is true (the built tuner's path)")]
    if tuner.config is not None:
        files.append((CONFIG_CONTEXT, context.inputs.files[tuner.config]))
        env.append(EnvVar(CONFIG_ENV, f"{values.config}",
                          f"{NAME}.config names the configuration"))
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("rccl-tuner", "stage.j2",
                    "toolchain + RCCL's example tuner plugin and its probe",
                    "tuner repository/commit, interface adapter"),
        steps=("final.j2",), files=tuple(files), scripts=((CHECK, FOLDER / "check.py"),),
        build_packages=BUILD_PACKAGES,
        linked_files=(values.library, values.probe),
        path=(f"{PREFIX}/bin",),
        env=tuple(env),
        # "interface" (what RCCL looks up, what the tuner exports) is added by the final
        # stage's check.
        manifest={"enabled": True,
                  "source": {"repository": locked.repository, "ref": locked.ref,
                             "commit": locked.commit, "subdir": tuner.example_dir}
                  if locked else None,
                  "interface_adapter": values.interface_adapter, "library": values.library,
                  "probe": values.probe, "config": values.config},
        sources=(PinnedSource(NAME, "rccl-tuner", locked, subdir=tuner.example_dir),)
        if locked else (),
        sizes=((PREFIX, "RCCL tuner"),))


COMPONENT = Component(
    name=NAME, title="RCCL tuner", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
    project_files=project_files, edf_notes=edf_notes,
    # The pinned RCCL it is checked against; the network plugin whose release it judges
    # (a tuner beside an old plugin's own).
    needs=("rccl", "network_plugin"),
)
