"""TransformerEngine for ROCm: the recipe section and its rules, what the lock pins for it
(the index's wheels and the extension's source archive, or ROCm/TransformerEngine at a
commit), and its plan (the transformer-engine stage, its final-stage steps, manifest and
SBOM part)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from imagebuild.components.protocol import (
    Component,
    ComponentPlan,
    PlanContext,
    ProblemAt,
    RecipeData,
    SectionData,
    Stage,
)
from imagebuild.components.shared import (
    SOURCE_BUILD_PACKAGES,
    git_source,
    pinned_source,
    python_dev_package,
    require_keys,
)
from imagebuild.lock.model import GitPin, IndexSdist, IndexWheels, Pin, PinnedSource
from imagebuild.recipe import grammar
from imagebuild.recipe.fields import GIT_REF, REPOSITORY, Bool, Obj, Seq, Str, exact_version
from imagebuild.recipe.model import GitSource, Recipe

NAME = "transformer_engine"
#: repo.radeon.com's TransformerEngine for ROCm (ROCm/TransformerEngine README, "from ROCm
#: 7.0 ... manylinux wheels"): the Python package and the common library as wheels, the
#: PyTorch extension as a source archive compiled against the installed torch.
WHEELS = ("transformer-engine", "transformer-engine-rocm")
TORCH_SDIST = "transformer-engine-torch"
#: The GPU targets of the index's common library: AMD builds transformer_engine_rocm for
#: gfx942;gfx950 only (ROCm/TransformerEngine build_tools/wheel_utils/Dockerfile.rocm.manylinux.x86).
WHEEL_TARGETS = ("gfx942", "gfx950")
#: Its source's key in the lock's [tool.imagebuild.sources].
LOCK_KEY = "transformer-engine"
#: What the source build imports beyond torch, locked with the wheels: setuptools below 80
#: (ROCm/TransformerEngine README: "use setuptools<80" when the build fails with a newer
#: one) and pybind11 (its setup.py builds the extensions with it); and what the built wheel
#: requires at run time (TransformerEngine's setup.py install_reqs), since the final stage
#: installs it without dependencies.
SOURCE_REQUIREMENTS = ("setuptools<80", "pybind11", "pydantic", "importlib-metadata>=1.0",
                       "packaging")


@dataclass(frozen=True)
class TransformerEngine:
    enabled: bool
    #: The index's release (wheels and the extension's source archive); "" from source.
    version: str = ""
    #: ROCm/TransformerEngine at a ref, built with its submodules; None from the index.
    source: GitSource | None = None
    #: GPU targets of gpu_targets the recipe accepts TransformerEngine's libraries without.
    missing_targets: tuple[str, ...] = ()

    def wheel_pins(self) -> tuple[tuple[str, str], ...]:
        return tuple((name, self.version) for name in WHEELS)

    def lock_inputs(self) -> dict[str, Any]:
        if self.source is not None:
            return {NAME: asdict(self.source)}
        return {NAME: self.version}


def section(recipe: Recipe) -> TransformerEngine | None:
    """The recipe's TransformerEngine section when the image has it."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, TransformerEngine) and found.enabled else None


SPEC = Obj(
    description="TransformerEngine for ROCm, either from the wheel index (version: the "
                "transformer_engine and transformer_engine_rocm wheels, and the "
                "transformer_engine_torch source archive built in the image against its "
                "torch) or from ROCm/TransformerEngine's source (repository, ref: pinned by "
                "the lock to a commit, built with its submodules against the venv's torch), "
                "for gpu_targets; the build checks its libraries hold code for each target",
    fields={
        "enabled": Bool(),
        "version": Str("a TransformerEngine release on the index, like 2.2.0",
                       grammar.VERSION_TEXT, check=exact_version),
        "repository": replace(REPOSITORY, nullable=True),
        "ref": replace(GIT_REF, nullable=True),
        "missing_targets": Seq(Str("a GPU target of gpu_targets that TransformerEngine's "
                                   "libraries may lack, like gfx90a", grammar.GFX_TARGET)),
    })
DEFAULTS = {"enabled": False, "missing_targets": []}


def _base(target: str) -> str:
    return target.split(":", 1)[0]


def rules(engine: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    from_source = engine.get("repository") is not None or engine.get("ref") is not None
    if from_source:
        for key in ("repository", "ref"):
            if engine.get(key) is None:
                problem((NAME, key), f"missing (required with transformer_engine."
                        f"{'ref' if key == 'repository' else 'repository'})")
        if "version" in engine:
            problem((NAME, "version"), "set with repository and ref: name either the index's "
                    "release (version) or a source (repository, ref; a recipe extending one "
                    "with a source sets both to null to take the index's release)")
    else:
        require_keys(NAME, engine, ("version",), problem)
    for name in (*WHEELS, TORCH_SDIST):
        if name in recipe["wheels"]["packages"]:
            problem(("wheels", "packages", name), "set by transformer_engine: leave "
                    "TransformerEngine's packages out of wheels.packages")
    targets = [_base(t) for t in recipe["gpu_targets"]]
    accepted = [_base(t) for t in engine["missing_targets"]]
    for target in accepted:
        if target not in targets:
            problem((NAME, "missing_targets"), f"{target} is not in gpu_targets")
    if not from_source and recipe["rocm"] is not None:
        lacking = [t for t in targets if t not in WHEEL_TARGETS and t not in accepted]
        if lacking:
            problem((NAME, "version"), f"the index's TransformerEngine has no code for "
                    f"{', '.join(lacking)} (AMD builds transformer_engine_rocm for "
                    f"{';'.join(WHEEL_TARGETS)} only): its first kernel there would fail "
                    "with \"invalid device function\"; build it from source for gpu_targets "
                    "(transformer_engine.repository and ref), or accept it with "
                    f"transformer_engine.missing_targets: [{', '.join(lacking)}]")


def read(engine: SectionData, recipe: RecipeData) -> TransformerEngine:
    source = git_source(engine) if engine.get("repository") is not None else None
    return TransformerEngine(enabled=engine["enabled"], version=str(engine.get("version", "")),
                             source=source, missing_targets=tuple(engine["missing_targets"]))


def requirements(engine: TransformerEngine) -> tuple[str, ...]:
    """From source: its build's and the built wheel's requirements (the index route's come
    with the index's files)."""
    return SOURCE_REQUIREMENTS if engine.source is not None else ()


def pins(engine: TransformerEngine, recipe: Recipe) -> tuple[Pin, ...]:
    """From source: the repository's commit. From the index: its wheels and the extension's
    source archive, of the recipe's version."""
    if engine.source is not None:
        return (GitPin(LOCK_KEY, engine.source),)
    return (IndexWheels(engine.wheel_pins()), IndexSdist(TORCH_SDIST, engine.version))


FOLDER = Path(__file__).resolve().parent
#: The build-time check of TransformerEngine's built PyTorch extension (staged in the
#: build context, bind-mounted into the final stage).
CHECK = "transformer-engine-check.py"
#: Memory one compile job of the extension may take (MAX_JOBS = memory / this, at most the
#: CPUs): hipcc compiles of torch extensions take several GB each. A rule of thumb.
JOB_MEMORY_GIB = 4


#: Where the source route checks the repository out.
CHECKOUT = "/usr/src/transformer-engine"
#: The distributions the check reads: the index's extension, or the source build's one wheel
#: (the common library and the PyTorch extension in one).
INDEX_DISTRIBUTION = "transformer_engine_torch"
SOURCE_DISTRIBUTION = "transformer_engine"


@dataclass(frozen=True)
class TransformerEnginePlan:
    version: str
    #: The locked source archive of the PyTorch extension (None when unlocked or from source).
    sdist_url: str | None
    sdist_sha256: str | None
    #: ``;``-joined GPU targets for NVTE_ROCM_ARCH and PYTORCH_ROCM_ARCH; "" on a CPU image.
    targets: str
    rocm_prefix: str | None
    #: From source: the repository and the locked commit (or the ref, unlocked).
    repository: str | None = None
    revision: str | None = None
    ref: str | None = None
    #: ``,``-joined targets the recipe accepts TransformerEngine's libraries without.
    missing_targets: str = ""
    wheel_dir: str = "/opt/transformer-engine-wheels"
    job_memory_gib: int = JOB_MEMORY_GIB
    check: str = CHECK
    checkout: str = CHECKOUT

    @property
    def from_source(self) -> bool:
        return self.repository is not None

    @property
    def distribution(self) -> str:
        return SOURCE_DISTRIBUTION if self.from_source else INDEX_DISTRIBUTION

    @property
    def submodules_record(self) -> str:
        """The submodules' commits, as the source checkout has them (git submodule status)."""
        return f"{self.wheel_dir}/submodules.txt"

    @property
    def sdist_file(self) -> str:
        return f"/tmp/{TORCH_SDIST}-{self.version}.tar.gz"



def planned(parts: Mapping[str, ComponentPlan]) -> TransformerEnginePlan | None:
    """TransformerEngine's plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    if context.section.source is not None:
        return _source_plan(context)
    recipe, engine, lock = context.recipe, context.section, context.lock
    sdist = lock.sdist(TORCH_SDIST) if lock else None
    values = TransformerEnginePlan(
        version=engine.version, sdist_url=sdist.url if sdist else None,
        sdist_sha256=sdist.sha256 if sdist else None, targets=";".join(recipe.gpu_targets),
        rocm_prefix=None if recipe.cpu_only else recipe.rocm_prefix,
        missing_targets=",".join(engine.missing_targets))
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("transformer-engine", "stage.j2",
                    "toolchain + TransformerEngine's torch extension",
                    "its locked source archive, the venv, GPU targets", on_venv=True),
        steps=("final.j2",), scripts=((CHECK, FOLDER / "check.py"),),
        # The interpreter's headers (the extension is compiled against the venv's Python)
        # and curl (the stage fetches the archive).
        build_packages=(*SOURCE_BUILD_PACKAGES, python_dev_package(recipe), "curl"),
        # zstd: the device-code check reads compressed offload bundles with it.
        runtime_packages=("zstd",) if values.targets and values.rocm_prefix else (),
        # "built" (the built files and what they link) and, for a ROCm image, "device_code"
        # are added by the final stage's check.
        manifest={"enabled": True, "version": values.version,
                  "gpu_targets": values.targets.split(";") if values.targets else [],
                  "missing_targets_accepted": list(engine.missing_targets),
                  "torch_extension_source": {"url": values.sdist_url,
                                             "sha256": values.sdist_sha256}},
        sources=(PinnedSource(NAME, TORCH_SDIST, sdist),) if sdist else ())


def _source_plan(context: PlanContext) -> ComponentPlan:
    """ROCm/TransformerEngine at the locked commit, with its submodules, built as AMD's
    Dockerfiles build it: one wheel, for gpu_targets, against the venv's torch."""
    recipe, engine, lock = context.recipe, context.section, context.lock
    locked = lock.git(LOCK_KEY) if lock else None
    repository, revision = pinned_source(engine.source, locked)
    values = TransformerEnginePlan(
        version="", sdist_url=None, sdist_sha256=None, targets=";".join(recipe.gpu_targets),
        rocm_prefix=None if recipe.cpu_only else recipe.rocm_prefix,
        repository=repository, revision=revision, ref=engine.source.ref,
        missing_targets=",".join(engine.missing_targets))
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("transformer-engine", "stage.j2",
                    "toolchain + TransformerEngine from source (common library, PyTorch "
                    "extension)", "TransformerEngine repository/commit, the venv, GPU targets",
                    on_venv=True),
        steps=("final.j2",), scripts=((CHECK, FOLDER / "check.py"),),
        # The interpreter's headers, CMake and ninja for its common library's build
        # (TransformerEngine's setup.py pip-installs them when none is found: not offline).
        build_packages=(*SOURCE_BUILD_PACKAGES, python_dev_package(recipe), "cmake",
                        "ninja-build"),
        # zstd: the device-code check reads compressed offload bundles with it.
        runtime_packages=("zstd",) if recipe.gpu_targets and not recipe.cpu_only else (),
        # "version", "built", "submodules" and "device_code" are added by the final stage's
        # check.
        manifest={"enabled": True, "gpu_targets": list(recipe.gpu_targets),
                  "missing_targets_accepted": list(engine.missing_targets),
                  "source": {"repository": locked.repository, "ref": locked.ref,
                             "commit": locked.commit} if locked else None},
        sources=(PinnedSource(NAME, "transformer-engine", locked),) if locked else ())


COMPONENT = Component(
    name=NAME, title="TransformerEngine", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
    requirements=requirements,
)
