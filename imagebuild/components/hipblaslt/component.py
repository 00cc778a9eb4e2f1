"""hipBLASLt built from source: its recipe section and rules, what the lock pins for it, and
its plan (the hipblaslt stage, its final-stage steps, manifest, SBOM and size parts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

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
    git_source,
    needs_rocm,
    pinned_source,
    refused_with_rocm_wheels,
    require_keys,
)
from imagebuild.errors import RenderError, short_path
from imagebuild.lock.model import GitPin, LockedGit, Pin, PinnedSource
from imagebuild.recipe import grammar
from imagebuild.recipe.fields import GIT_REF, REPOSITORY, Bool, Obj, Str
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.recipe.rocm_layout import release

NAME = "hipblaslt"
#: Its source's key in the lock's [tool.imagebuild.sources].
LOCK_KEY = "hipblaslt"
#: The key of AOCL-BLIS, the clients' CPU reference library (see BLIS_PREFIX).
BLIS_LOCK_KEY = "aocl-blis"


@dataclass(frozen=True)
class HipBlasLt:
    enabled: bool
    source: GitSource
    #: Subdirectory of the repository holding hipBLASLt (rocm-libraries monorepo layout).
    subdir: str
    clients: bool
    #: Keep hipblaslt-bench, utilities/find_exact.py and the logic YAMLs for offline tuning.
    tuning_kit: bool
    #: install.sh --logic-yaml-filter: only the logic files matching this glob get kernels.
    logic_filter: str | None = None
    #: False: install.sh --skip_rocroller (HIPBLASLT_ENABLE_ROCROLLER=OFF).
    rocroller: bool = True
    #: AOCL-BLIS, built from source for the clients (None when they are off).
    blis: GitSource | None = None

    def lock_inputs(self) -> dict[str, Any]:
        inputs = {NAME: asdict(self.source) if self.enabled else None}
        if self.enabled and self.blis is not None:
            inputs[f"{NAME}_blis"] = asdict(self.blis)
        return inputs


def section(recipe: Recipe) -> HipBlasLt | None:
    """The recipe's hipBLASLt section when it builds hipBLASLt."""
    found = recipe.components.get(NAME)
    return found if isinstance(found, HipBlasLt) and found.enabled else None


SPEC = Obj(fields={
    "enabled": Bool(),
    "repository": REPOSITORY,
    "ref": GIT_REF,
    "subdir": Str("a relative directory inside the repository", grammar.SUBDIR),
    "clients": Bool(),
    "tuning_kit": Bool(),
    "logic_filter": Str(
        "a logic-file glob relative to hipBLASLt's Logic directory, like gfx942/*/* "
        "(install.sh --logic-yaml-filter; ROCm >= 6.4): kernels for the logic files it "
        "leaves out are not built", grammar.LOGIC_FILTER),
    "rocroller": Bool(),
    "blis": Obj(description="AOCL-BLIS, the CPU reference the clients link (with clients: "
                "true; default https://github.com/amd/blis.git at 5.1): its repository and "
                "ref, which the lock pins to a commit; built into /usr/local, where "
                "install.sh -c looks before it downloads a prebuilt copy from GitHub",
                fields={"repository": REPOSITORY, "ref": GIT_REF}),
})
DEFAULTS = {"enabled": False, "subdir": ".", "clients": True, "tuning_kit": True,
            "rocroller": True}
#: AOCL-BLIS for the clients when the section names none, or names only one of its keys:
#: AOCL 5.1's release tag (https://github.com/amd/blis/tags). Applied in read(), not as a
#: schema default, so a recipe that builds no clients records none.
BLIS_DEFAULT = {"repository": "https://github.com/amd/blis.git", "ref": "5.1"}

#: The first ROCm release whose hipBLASLt install.sh takes each build option. ROCm/hipBLASLt
#: added --logic-yaml-filter (-> Tensile_LOGIC_FILTER) on develop in #1007 (2024-09-25),
#: after the rocm-6.3 release branch was cut (release/rocm-rel-6.3.0.1 has no such option),
#: so 6.4 is the first release line with it; the rocm-libraries monorepo's
#: projects/hipblaslt/install.sh keeps it (-> TENSILELITE_LOGIC_FILTER). --skip_rocroller
#: (HIPBLASLT_ENABLE_ROCROLLER=OFF) exists from 7.0, when rocRoller joined hipBLASLt; 6.x
#: builds no rocRoller. install.sh's getopt stops the build on an option it does not know.
OPTION_SINCE = {"logic_filter": (6, 4), "rocroller": (7, 0)}


def rules(hip: SectionData, recipe: RecipeData, problem: ProblemAt) -> None:
    needs_rocm(NAME, recipe, problem)
    require_keys(NAME, hip, ("repository", "ref"), problem)
    if not recipe["gpu_targets"]:
        problem((NAME, "enabled"), "needs gpu_targets to list the GPUs to build hipBLASLt for "
                "(building for every target takes hours)")
    if recipe["rocm"] is not None:
        _option_checks(hip, recipe["rocm"], problem)
    # The libraries wheel ships the libhipblaslt that torch preloads through
    # rocm_sdk.initialize_process (TheRock docs/packaging/python_packaging.md): a source
    # build would be a second copy nothing loads, unless it replaced a file inside a
    # wheel's directory, which `rocm-sdk test` and the wheel's RECORD would disown.
    refused_with_rocm_wheels(NAME, recipe, problem,
                             "torch loads the libhipblaslt of the rocm-sdk-libraries wheel, so "
                             "a source build would go unused (`imagebuild tune gemm` then "
                             "tunes with TunableOp alone)")


def _option_checks(hip: SectionData, rocm: str, problem: ProblemAt) -> None:
    """Refuse a hipBLASLt build option the recipe's release cannot take."""
    line = release(rocm)
    asked = {"logic_filter": hip.get("logic_filter") is not None,
             "rocroller": hip.get("rocroller") is False}
    for key, since in OPTION_SINCE.items():
        if asked[key] and line < since:
            first = ".".join(map(str, since))
            what = ("install.sh has no --logic-yaml-filter before it (6.x's -l/--logic, "
                    "Tensile_LOGIC, picks a whole logic set such as asm_full, not a file "
                    "filter)" if key == "logic_filter" else
                    "hipBLASLt builds no rocRoller before it (and its install.sh has no "
                    "--skip_rocroller)")
            problem((NAME, key), f"needs ROCm >= {first}; this recipe is ROCm {rocm}: "
                    f"{what}. Remove the key")


def read(hip: SectionData, recipe: RecipeData) -> HipBlasLt:
    # Without it install.sh -c downloads AOCL-BLIS from GitHub during the build (BLIS_PREFIX).
    blis = (git_source({**BLIS_DEFAULT, **(hip.get("blis") or {})})
            if hip["enabled"] and hip["clients"] else None)
    return HipBlasLt(enabled=hip["enabled"], source=git_source(hip), subdir=hip["subdir"],
                     clients=hip["clients"], tuning_kit=hip["tuning_kit"],
                     logic_filter=hip.get("logic_filter"), rocroller=hip["rocroller"],
                     blis=blis)


def pins(hip: HipBlasLt, recipe: Recipe) -> tuple[Pin, ...]:
    blis = (GitPin(BLIS_LOCK_KEY, hip.blis),) if hip.clients and hip.blis else ()
    return (GitPin(LOCK_KEY, hip.source), *blis)


FOLDER = Path(__file__).resolve().parent
PREFIX = "/opt/hipblaslt"
#: The build-time check that torch and hipblaslt-bench map the same libhipblaslt (staged in
#: the build context, bind-mounted into the final stage).
CHECK = "hipblaslt-check.py"
#: The cblas CMake package configuration hipBLASLt's clients look for before 1.1 (staged in
#: the build context, installed where install.sh -d's LAPACK build would put it).
CBLAS_CONFIG = "hipblaslt-cblas-config.cmake"
TUNING_KIT = "hipblaslt-tuning-kit.sh"
#: Runtime libraries of hipBLASLt's clients (gfortran, and the system LAPACK/BLAS their CPU
#: reference links: the build packages' liblapack-dev/libblas-dev replace what install.sh -d
#: would build into /usr/local).
CLIENT_RUNTIME_PACKAGES = ("libgfortran5", "liblapack3", "libblas3")
#: Memory one build job may take: install.sh's -j (Tensile's parallel jobs; ROCm/hipBLASLt
#: install.sh passes it on as Tensile_CPU_THREADS) and the CPUs install.sh may use (its
#: final `make -j$(nproc)`) are capped at the builder's memory / this, so a many-core
#: builder with little memory is not OOM-killed. A rule of thumb, not a measured figure:
#: the peak per job depends on the logic files built.
TENSILE_JOB_MEMORY_GIB = 4
#: Which libhipblaslt a torch wheel loads (see torch_hipblaslt).
TorchLinks = Literal["system", "bundled"]
#: Where AOCL-BLIS is installed so that install.sh -c does not download it. Its
#: install_blis (ROCm/hipBLASLt install.sh, e.g. commit 7d9fb683; rocm-libraries
#: projects/hipblaslt tasks.py `_install_blis` after install.sh became a wrapper of
#: `invoke build`) wgets github.com/amd/blis/releases/download/2.0/aocl-blis-mt-*-2.0.tar.gz
#: unless /usr/local/lib/libblis.a (or an /opt/AMD/aocl copy) exists, and the clients'
#: findBLIS.cmake / FindBLIS.cmake then take /usr/local/lib/libblis.a (FindBLIS also
#: libblis-mt.a) with the headers in /usr/local/include/blis.
BLIS_PREFIX = "/usr/local"
#: AOCL-BLIS's configuration family of the AMD Zen generations with runtime dispatch and
#: a generic fallback (config_registry), so the library does not depend on the builder's CPU.
BLIS_CONFIG = "amdzen"


@dataclass(frozen=True)
class BlisPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    prefix: str = BLIS_PREFIX
    config: str = BLIS_CONFIG
    source_dir: str = "/usr/src/aocl-blis"

    @property
    def library(self) -> str:
        """The file whose presence makes install.sh skip its download."""
        return f"{self.prefix}/lib/libblis.a"

    @property
    def include_dir(self) -> str:
        return f"{self.prefix}/include/blis"


@dataclass(frozen=True)
class HipBlasLtPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    subdir: str
    #: ``;``-joined GPU targets, as CMake's AMDGPU_TARGETS takes them.
    targets: str
    clients: bool
    tuning_kit: bool
    prefix: str
    source_dir: str
    #: Where ROCm is in the base image; a .lw torch wheel loads <rocm_prefix>/lib's library.
    rocm_prefix: str
    #: The torch wheel version the decision below was made from.
    torch_version: str
    #: "system": the wheel links the system ROCm's libhipblaslt (repo.radeon.com ".lw"
    #: wheels), so the built library replaces the base image's in <rocm_prefix>/lib;
    #: "bundled": the wheel carries its own in torch/lib, which is replaced by links to the
    #: built one. Either way one libhipblaslt file serves torch and hipblaslt-bench.
    torch_links: TorchLinks
    #: install.sh --logic-yaml-filter (None: every logic file of the targets).
    logic_filter: str | None = None
    #: False: install.sh --skip_rocroller.
    rocroller: bool = True
    #: AOCL-BLIS for the clients (None when they are off).
    blis: BlisPlan | None = None
    tensile_job_memory_gib: int = TENSILE_JOB_MEMORY_GIB
    check: str = CHECK
    cblas_config: str = CBLAS_CONFIG

    @property
    def monorepo(self) -> bool:
        """rocm-libraries keeps hipBLASLt in a subdirectory: fetched as a sparse checkout."""
        return self.subdir != "."

    @property
    def library_dir(self) -> str:
        return f"{self.prefix}/lib"

    @property
    def bench(self) -> str | None:
        return f"{self.prefix}/bin/hipblaslt-bench" if self.clients else None

    @property
    def replaces(self) -> str:
        """The directory whose libhipblaslt* and hipblaslt/ become links to the built ones."""
        return f"{self.rocm_prefix}/lib" if self.torch_links == "system" else "torch/lib"

    @property
    def kit(self) -> str:
        """The offline tuning kit's root (kept build-only files: find_exact.py's tree)."""
        return f"{self.prefix}/tuning"


def torch_hipblaslt(version: str) -> TorchLinks:
    """Which libhipblaslt a ROCm torch wheel loads, from its version's local part.

    repo.radeon.com's ".lw" wheels (e.g. 2.8.0+rocm7.0.2.lw.git245bf6ed) are built against
    the system ROCm and carry none of its libraries: "system". The others (e.g.
    2.8.0+rocm6.4.4.gitc1404424, and pytorch.org's +rocmX.Y) bundle ROCm's libraries,
    libhipblaslt and its kernels among them, in torch/lib: "bundled".
    """
    local = version.partition("+")[2]
    return "system" if "lw" in local.split(".") else "bundled"



def planned(parts: Mapping[str, ComponentPlan]) -> HipBlasLtPlan | None:
    """HipBLASLt's plan among a build plan's parts (``BuildPlan.parts``), when on."""
    part = parts.get(NAME)
    return part.values if part is not None else None


def plan(context: PlanContext) -> ComponentPlan:
    recipe, hip, lock = context.recipe, context.section, context.lock
    where = short_path(recipe.path)
    if ".." in hip.subdir.split("/"):
        raise RenderError(f"{where}: hipblaslt.subdir: {hip.subdir!r} leaves the checkout "
                          "(no '..' parts)")
    locked = lock.git(LOCK_KEY) if lock else None
    locked_torch = lock.wheel("torch") if lock else None
    torch = recipe.wheels.version_of("torch") or (locked_torch.version if locked_torch
                                                  else None)
    if torch is None:
        raise RenderError(f"{where}: hipblaslt: torch is not pinned in wheels.packages, so "
                          "which libhipblaslt it loads (a .lw wheel links the system ROCm's, "
                          "others bundle their own) cannot be decided")
    repository, revision = pinned_source(hip.source, locked)
    locked_blis = lock.git(BLIS_LOCK_KEY) if lock and hip.clients else None
    blis = None
    if hip.clients:
        if hip.blis is None:
            raise RenderError(f"{where}: hipblaslt.blis: missing (required with clients: "
                              "true), or install.sh -c would download AOCL-BLIS")
        blis = BlisPlan(*pinned_source(hip.blis, locked_blis), ref=hip.blis.ref)
    values = HipBlasLtPlan(
        repository=repository, revision=revision, ref=hip.source.ref, subdir=hip.subdir,
        targets=";".join(recipe.gpu_targets), clients=hip.clients,
        tuning_kit=hip.tuning_kit and hip.clients, prefix=PREFIX,
        source_dir="/usr/src/hipblaslt" + ("" if hip.subdir == "." else f"/{hip.subdir}"),
        rocm_prefix=recipe.rocm_prefix, torch_version=torch,
        torch_links=torch_hipblaslt(torch), logic_filter=hip.logic_filter,
        rocroller=hip.rocroller, blis=blis)
    files = [(TUNING_KIT, (FOLDER / "tuning-kit.sh").read_text())]
    if values.clients:
        files.append((CBLAS_CONFIG, (FOLDER / "cblas-config.cmake").read_text()))
    return ComponentPlan(
        name=NAME, values=values,
        stage=Stage("hipblaslt", "stage.j2",
                    "toolchain + " + ("AOCL-BLIS + " if blis else "")
                    + "hipBLASLt build + tuning kit",
                    ("AOCL-BLIS commit, " if blis else "") + "hipBLASLt repository/commit, "
                    "GPU targets (source layer: commit only)"),
        steps=("final.j2",), files=tuple(files), scripts=((CHECK, FOLDER / "check.py"),),
        runtime_packages=CLIENT_RUNTIME_PACKAGES if values.clients else (),
        library_path=(values.library_dir,),
        linked_files=(f"{values.library_dir}/libhipblaslt.so",
                      *((values.bench,) if values.bench else ())),
        manifest=_manifest(values, hip, recipe.gpu_targets, locked, locked_blis),
        sources=(*((PinnedSource(NAME, "hipblaslt", locked, subdir=hip.subdir),)
                   if locked else ()),
                 *((PinnedSource(NAME, BLIS_LOCK_KEY, locked_blis),) if locked_blis else ())),
        sizes=(*(((values.kit, "hipBLASLt tuning kit"),) if values.tuning_kit else ()),
               (PREFIX, "hipBLASLt")),
        keeps=(values.kit,) if values.tuning_kit else ())


def _manifest(values: HipBlasLtPlan, hip: HipBlasLt, targets: tuple[str, ...],
              locked: LockedGit | None, locked_blis: LockedGit | None) -> dict[str, Any]:
    """Its source, where it is and which library torch loads, decided from its wheel;
    "loaded" (the files torch maps and the bench links, proved one) is filled in by the
    final stage's check."""
    if locked is None:
        return {"enabled": True}
    kit, build = values.kit, f"{values.kit}/build/release"
    return {
        "enabled": True, "repository": locked.repository, "ref": locked.ref,
        "commit": locked.commit, "subdir": hip.subdir, "gpu_targets": list(targets),
        "clients": hip.clients, "prefix": PREFIX, "library": values.library_dir,
        "bench": values.bench,
        # Linked statically into the clients (the final stage has no /usr/local copy).
        "blis": {"repository": locked_blis.repository, "ref": locked_blis.ref,
                 "commit": locked_blis.commit,
                 "library": values.blis.library} if locked_blis and values.blis else None,
        # What find_exact.py runs and reads under build_dir, in the layout the kit always
        # has (hipblaslt-tuning-kit.sh: links where the release's own script reads others).
        "tuning_kit": {"root": kit, "find_exact": f"{kit}/utilities/find_exact.py",
                       "build_dir": build,
                       "bench": f"{build}/clients/staging/hipblaslt-bench",
                       "match_table": f"{build}/library/MatchTable.yaml",
                       "usage": f"python {kit}/utilities/find_exact.py CONFIG.yaml "
                                f"{build} OUT"} if values.tuning_kit else None,
        "torch": {"version": values.torch_version, "links": values.torch_links,
                  "replaced_in": values.replaces},
        "loaded": None,
    }


COMPONENT = Component(
    name=NAME, title="hipBLASLt", folder=FOLDER,
    spec=SPEC, defaults=DEFAULTS, read=read, rules=rules, pins=pins, plan=plan,
    always_recorded=True, needs_build_packages=True,
)
