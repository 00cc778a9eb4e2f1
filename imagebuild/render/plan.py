"""The build plan: a recipe, its checked lock, and every value the renderers derive from
them, made once, frozen and typed. The Dockerfile, the build context and the manifest are
rendered from a plan; none of them reads or checks a lock itself."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from imagebuild.components.transformer_engine.component import TORCH_SDIST as TE_TORCH_SDIST
from imagebuild.errors import RenderError
from imagebuild.lock.check import display
from imagebuild.lock.epoch import EPOCH_LABEL
from imagebuild.lock.model import Lock, LockedGit
from imagebuild.project import project_dir
from imagebuild.recipe.model import GitSource, Recipe
from imagebuild.render.layout import (
    HIPBLASLT_CLIENT_RUNTIME_PACKAGES,
    HIPBLASLT_PREFIX,
    IMAGE_MANIFEST,
    LABEL_NAMESPACE,
    LIBFABRIC_PREFIX,
    MEGATRON_PREFIX,
    MEGATRON_RUNTIME_PACKAGES,
    PLUGIN_RECORD,
    PLUGIN_RUNTIME_PACKAGES,
    RCCL_TESTS_COLLECTIVES,
    RCCL_TESTS_PREFIX,
    RCCL_TUNER_BUILD_PACKAGES,
    RCCL_TUNER_PREFIX,
    RESERVED_ENV,
    SOURCE_BUILD_PACKAGES,
)
from imagebuild.render.libfabric import LibfabricTarget, libfabric_target

#: Labels imagebuild writes from the base image; a recipe may not set them.
GENERATED_OCI_LABELS = ("org.opencontainers.image.base.name",
                        "org.opencontainers.image.base.digest")


#: The build-time check that torch and hipblaslt-bench map the same libhipblaslt (staged in
#: the build context, bind-mounted into the final stage).
HIPBLASLT_CHECK = "hipblaslt-check.py"
#: The cblas CMake package configuration hipBLASLt's clients look for before 1.1 (staged in
#: the build context, installed where install.sh -d's LAPACK build would put it).
HIPBLASLT_CBLAS_CONFIG = "hipblaslt-cblas-config.cmake"
#: Memory one build job may take: install.sh's -j (Tensile's parallel jobs; ROCm/hipBLASLt
#: install.sh passes it on as Tensile_CPU_THREADS) and the CPUs install.sh may use (its
#: final `make -j$(nproc)`) are capped at the builder's memory / this, so a many-core
#: builder with little memory is not OOM-killed. A rule of thumb, not a measured figure:
#: the peak per job depends on the logic files built.
TENSILE_JOB_MEMORY_GIB = 4
#: Which libhipblaslt a torch wheel loads (see torch_hipblaslt).
TorchLinks = Literal["system", "bundled"]


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
    tensile_job_memory_gib: int = TENSILE_JOB_MEMORY_GIB
    check: str = HIPBLASLT_CHECK
    cblas_config: str = HIPBLASLT_CBLAS_CONFIG

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
    #: What the plugin stage measured about the plugin (ELF symbol versions, RUNPATH),
    #: merged into the manifest by the final stage.
    record: str = PLUGIN_RECORD

    @property
    def library(self) -> str:
        return f"{self.prefix}/lib/librccl-net.so"


#: The build-time check that Megatron's dataset helpers are built, importable and up to date
#: for its run-time make (staged in the build context, bind-mounted into the final stage).
MEGATRON_CHECK = "megatron-check.py"


@dataclass(frozen=True)
class MegatronPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    prefix: str
    #: The venv interpreter's python<X.Y>-config, which Megatron's Makefile calls as
    #: python3-config: the dataset helpers get the venv's extension suffix.
    python_config: str
    #: The OS package holding it and the interpreter's headers (Debian and Ubuntu naming).
    python_dev_package: str
    check: str = MEGATRON_CHECK

    @property
    def datasets_dir(self) -> str:
        return f"{self.prefix}/megatron/core/datasets"


#: The build-time check that every rccl-tests benchmark is built, for exactly the recipe's
#: GPU targets (staged in the build context, bind-mounted into the rccl-tests stage).
RCCL_TESTS_CHECK = "rccl-tests-check.py"


@dataclass(frozen=True)
class RcclTestsPlan:
    repository: str
    #: The locked commit, or the recipe's ref when unlocked (review renders only).
    revision: str
    ref: str
    #: The recipe's GPU targets: hipcc builds device code for these only.
    targets: tuple[str, ...]
    #: Where ROCm is: hipcc, hipify-perl and RCCL's headers and library.
    rocm_prefix: str
    prefix: str = RCCL_TESTS_PREFIX
    check: str = RCCL_TESTS_CHECK

    @property
    def bin_dir(self) -> str:
        return f"{self.prefix}/bin"

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(f"{name}_perf" for name in RCCL_TESTS_COLLECTIVES)

    @property
    def offload_flags(self) -> str:
        """hipcc's device targets: one --offload-arch per recipe target, never its default
        (the build machine's GPU, or a long list where it has none)."""
        return "".join(f" --offload-arch={target}" for target in self.targets)

    @property
    def rocm_path(self) -> str | None:
        """ROCM_PATH for the build, None where it must stay unset: Debian installs ROCm
        under /usr, and hipcc with ROCM_PATH=/usr looks for the device libraries in the
        wrong place; its own defaults find them. AMD's images have /opt/rocm, rccl-tests'
        default (src/Makefile), which any other prefix replaces."""
        return None if self.rocm_prefix == "/usr" else self.rocm_prefix


#: The build-time check that RCCL would load the tuner plugin, and the C sources the tuner
#: stage compiles (staged in the build context, bind-mounted into the stage).
RCCL_TUNER_CHECK = "tuner-plugin-check.py"
RCCL_TUNER_ADAPTER = "rccl-tuner-v4.c"
RCCL_TUNER_PROBE = "rccl-tuner-probe.c"
#: The variables RCCL reads for a tuner (src/plugin/tuner.cc) and the example reads for its
#: configuration (plugin.c): the image sets the first when the stage is on, the second when
#: the recipe names a configuration.
TUNER_PLUGIN_ENV = "NCCL_TUNER_PLUGIN"
TUNER_CONFIG_ENV = "NCCL_TUNER_CONFIG_FILE"
#: Where the build context stages the recipe's tuner configuration.
TUNER_CONFIG_CONTEXT = "rccl-tuner.conf"


@dataclass(frozen=True)
class RcclTunerPlan:
    url: str
    sha256: str
    #: The example's directory in the unpacked archive.
    source_dir: str
    interface_adapter: bool
    #: Where ROCm is: the RCCL whose lookups the check reads.
    rocm_prefix: str
    #: The recipe's tuner configuration (absolute, in the project), or None.
    config_source: Path | None = None
    prefix: str = RCCL_TUNER_PREFIX
    check: str = RCCL_TUNER_CHECK
    adapter: str = RCCL_TUNER_ADAPTER
    probe_source: str = RCCL_TUNER_PROBE

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
        return f"{self.prefix}/nccl_tuner.conf" if self.config_source else None

    @property
    def sources(self) -> tuple[str, ...]:
        """The files the build context stages for this stage."""
        return (self.check, self.probe_source, *((self.adapter,) if self.interface_adapter
                                                 else ()))


#: The build-time check of TransformerEngine's built PyTorch extension (staged in the
#: build context, bind-mounted into the final stage).
TRANSFORMER_ENGINE_CHECK = "transformer-engine-check.py"
#: Memory one compile job of the extension may take (MAX_JOBS = memory / this, at most the
#: CPUs): hipcc compiles of torch extensions take several GB each. A rule of thumb.
TE_JOB_MEMORY_GIB = 4


@dataclass(frozen=True)
class TransformerEnginePlan:
    version: str
    #: The locked source archive of the PyTorch extension (None when unlocked).
    sdist_url: str | None
    sdist_sha256: str | None
    #: ``;``-joined GPU targets for NVTE_ROCM_ARCH and PYTORCH_ROCM_ARCH; "" on a CPU image.
    targets: str
    rocm_prefix: str | None
    wheel_dir: str = "/opt/transformer-engine-wheels"
    job_memory_gib: int = TE_JOB_MEMORY_GIB
    check: str = TRANSFORMER_ENGINE_CHECK

    @property
    def sdist_file(self) -> str:
        return f"/tmp/{TE_TORCH_SDIST}-{self.version}.tar.gz"


@dataclass(frozen=True)
class BuildPlan:
    recipe: Recipe
    #: None: unlocked, rendered for review only (a build refuses it).
    lock: Lock | None
    hipblaslt: HipBlasLtPlan | None
    plugin: PluginPlan | None
    #: OS packages of the toolchain stage: the recipe's build_packages, then what the
    #: Megatron, TransformerEngine and rccl-tests stages need.
    build_packages: tuple[str, ...]
    #: OS packages of the final stage: the recipe's, then what the stages' installs need.
    runtime_packages: tuple[str, ...]
    added_packages: tuple[str, ...]
    library_path: tuple[str, ...]
    #: Files the final stage checks with ldd (every shared library they need is present).
    linked_files: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    #: Cache-mount id suffix shared by builds on the same base distribution.
    cache_scope: str
    megatron: MegatronPlan | None = None
    transformer_engine: TransformerEnginePlan | None = None
    rccl_tests: RcclTestsPlan | None = None
    rccl_tuner: RcclTunerPlan | None = None

    @property
    def locked(self) -> bool:
        return self.lock is not None

    @property
    def builds_from_source(self) -> bool:
        return (self.hipblaslt is not None or self.plugin is not None
                or self.megatron is not None or self.transformer_engine is not None
                or self.rccl_tests is not None or self.rccl_tuner is not None)


def make_plan(recipe: Recipe, lock: Lock | None) -> BuildPlan:
    """The plan for ``recipe`` and its lock, which the caller has checked
    (lock.check.current_lock or check_lock; None: unlocked, for review renders). The plan
    never checks a lock again."""
    _check_recipe(recipe)
    hipblaslt = _hipblaslt(recipe, lock)
    plugin = _plugin(recipe, lock)
    megatron = _megatron(recipe, lock)
    engine = _transformer_engine(recipe, lock)
    tests = _rccl_tests(recipe, lock)
    tuner = _rccl_tuner(recipe)
    added = list(PLUGIN_RUNTIME_PACKAGES if plugin else ())
    added += HIPBLASLT_CLIENT_RUNTIME_PACKAGES if hipblaslt and hipblaslt.clients else ()
    wanted: list[str] = []
    if megatron:
        added += [*MEGATRON_RUNTIME_PACKAGES, megatron.python_dev_package]
    if megatron or engine or tests:
        wanted += SOURCE_BUILD_PACKAGES
    if megatron or engine:
        # The interpreter's headers: the dataset helpers and the TransformerEngine
        # extension are compiled against the venv's Python.
        wanted += [python_dev_package(recipe), *(("curl",) if engine else ())]
    if tuner:
        wanted += RCCL_TUNER_BUILD_PACKAGES
    build = list(dict.fromkeys([*recipe.build_packages, *wanted]))
    runtime = list(recipe.os_packages)
    added = [p for p in dict.fromkeys(added) if p not in runtime]
    library_path = ([f"{HIPBLASLT_PREFIX}/lib"] if hipblaslt else []) + \
        ([f"{plugin.prefix}/lib"] if plugin else [])
    linked = [plugin.library] if plugin else []
    if hipblaslt:
        linked.append(f"{HIPBLASLT_PREFIX}/lib/libhipblaslt.so")
        if hipblaslt.clients:
            linked.append(f"{HIPBLASLT_PREFIX}/bin/hipblaslt-bench")
    if tests:
        linked += [f"{tests.bin_dir}/{name}" for name in tests.binaries]
    if tuner:
        linked += [tuner.library, tuner.probe]
    return BuildPlan(
        recipe=recipe, lock=lock, hipblaslt=hipblaslt, plugin=plugin, megatron=megatron,
        transformer_engine=engine, rccl_tests=tests, rccl_tuner=tuner,
        build_packages=tuple(build), runtime_packages=tuple(runtime + added), added_packages=tuple(added),
        library_path=tuple(library_path), linked_files=tuple(linked),
        labels=_labels(recipe, lock), cache_scope=_cache_scope(recipe))


def plugin_prefix(recipe: Recipe) -> str:
    section: Any = recipe.components["network_plugin"]
    return f"/opt/{section.kind}"


def _hipblaslt(recipe: Recipe, lock: Lock | None) -> HipBlasLtPlan | None:
    hip: Any = recipe.components["hipblaslt"]
    if not hip.enabled:
        return None
    source = lock.git("hipblaslt") if lock else None
    locked_torch = lock.wheel("torch") if lock else None
    torch = recipe.wheels.version_of("torch") or (locked_torch.version if locked_torch
                                                  else None)
    if torch is None:
        raise RenderError(f"{display(recipe.path)}: hipblaslt: torch is not pinned in "
                          "wheels.packages, so which libhipblaslt it loads (a .lw wheel links "
                          "the system ROCm's, others bundle their own) cannot be decided")
    repository, revision = pinned_source(hip.source, source)
    return HipBlasLtPlan(
        repository=repository, revision=revision, ref=hip.source.ref, subdir=hip.subdir, targets=";".join(recipe.gpu_targets),
        clients=hip.clients, tuning_kit=hip.tuning_kit and hip.clients,
        prefix=HIPBLASLT_PREFIX,
        source_dir="/usr/src/hipblaslt" + ("" if hip.subdir == "." else f"/{hip.subdir}"),
        rocm_prefix=recipe.rocm_prefix, torch_version=torch,
        torch_links=torch_hipblaslt(torch), logic_filter=hip.logic_filter,
        rocroller=hip.rocroller)


def torch_hipblaslt(version: str) -> TorchLinks:
    """Which libhipblaslt a ROCm torch wheel loads, from its version's local part.

    repo.radeon.com's ".lw" wheels (e.g. 2.8.0+rocm7.0.2.lw.git245bf6ed) are built against
    the system ROCm and carry none of its libraries: "system". The others (e.g.
    2.8.0+rocm6.4.4.gitc1404424, and pytorch.org's +rocmX.Y) bundle ROCm's libraries,
    libhipblaslt and its kernels among them, in torch/lib: "bundled".
    """
    local = version.partition("+")[2]
    return "system" if "lw" in local.split(".") else "bundled"


def _plugin(recipe: Recipe, lock: Lock | None) -> PluginPlan | None:
    plugin: Any = recipe.components["network_plugin"]
    if not plugin.enabled:
        return None
    source = lock.git("network-plugin") if lock else None
    archive = lock.archive("libfabric") if lock else None
    repository, revision = pinned_source(plugin.source, source)
    return PluginPlan(
        kind=plugin.kind, repository=repository, revision=revision, ref=plugin.source.ref,
        prefix=plugin_prefix(recipe), libfabric_version=plugin.libfabric.version,
        libfabric_url=archive.url if archive else plugin.libfabric.url,
        libfabric_sha256=archive.sha256 if archive else None,
        libfabric_prefix=LIBFABRIC_PREFIX, rocm_prefix=recipe.rocm_prefix,
        libfabric_target=libfabric_target(recipe))


def pinned_source(source: GitSource, locked: LockedGit | None) -> tuple[str, str]:
    """(repository, revision) a stage fetches: the lock's URL (a --git-mirror at lock time
    rewrote it for this site) and commit, or the recipe's repository and ref when unlocked
    (review renders only)."""
    if locked is None:
        return source.repository, source.ref
    return locked.repository, locked.commit


def python_dev_package(recipe: Recipe) -> str:
    """The OS package with the headers and python<X.Y>-config of the venv's interpreter
    (Debian and Ubuntu naming)."""
    return f"python{recipe.python}-dev"


def _megatron(recipe: Recipe, lock: Lock | None) -> MegatronPlan | None:
    megatron: Any = recipe.components.get("megatron")
    if megatron is None or not megatron.enabled:
        return None
    repository, revision = pinned_source(megatron.source, lock.git("megatron") if lock else None)
    return MegatronPlan(
        repository=repository, revision=revision, ref=megatron.source.ref,
        prefix=MEGATRON_PREFIX, python_config=f"/usr/bin/python{recipe.python}-config",
        python_dev_package=python_dev_package(recipe))


def _rccl_tests(recipe: Recipe, lock: Lock | None) -> RcclTestsPlan | None:
    tests: Any = recipe.components.get("rccl_tests")
    if tests is None or not tests.enabled:
        return None
    repository, revision = pinned_source(tests.source, lock.git("rccl-tests") if lock else None)
    return RcclTestsPlan(
        repository=repository, revision=revision, ref=tests.source.ref,
        targets=recipe.gpu_targets, rocm_prefix=recipe.rocm_prefix)


def _rccl_tuner(recipe: Recipe) -> RcclTunerPlan | None:
    tuner: Any = recipe.components.get("rccl_tuner")
    if tuner is None or not tuner.enabled:
        return None
    config = None
    if tuner.config is not None:
        config = project_dir() / tuner.config
        if not config.is_file():
            raise RenderError(f"{display(recipe.path)}: rccl_tuner.config: {config} is not a "
                              "file (a path relative to the project, like "
                              "tuning/nccl_tuner.conf; `imagebuild tune rccl --sweep-results` "
                              "writes one)")
    return RcclTunerPlan(
        url=tuner.url, sha256=tuner.sha256, source_dir=f"/usr/src/rccl-tuner/{tuner.example_dir}",
        interface_adapter=tuner.interface_adapter, rocm_prefix=recipe.rocm_prefix,
        config_source=config)


def _transformer_engine(recipe: Recipe, lock: Lock | None) -> TransformerEnginePlan | None:
    engine: Any = recipe.components.get("transformer_engine")
    if engine is None or not engine.enabled:
        return None
    sdist = lock.sdist(TE_TORCH_SDIST) if lock else None
    return TransformerEnginePlan(
        version=engine.version, sdist_url=sdist.url if sdist else None,
        sdist_sha256=sdist.sha256 if sdist else None, targets=";".join(recipe.gpu_targets),
        rocm_prefix=None if recipe.cpu_only else recipe.rocm_prefix)


def _labels(recipe: Recipe, lock: Lock | None) -> tuple[tuple[str, str], ...]:
    labels = [(key, value) for key, value in recipe.labels]
    labels.append(("org.opencontainers.image.base.name", recipe.base_image.split("@", 1)[0]))
    if lock is not None:
        labels.append(("org.opencontainers.image.base.digest", lock.base_digest))
    labels += [
        ("imagebuild.recipe", recipe.name),
        ("imagebuild.input-hash", recipe.input_hash()),
        ("imagebuild.lock-hash", lock.file_hash() if lock else "UNLOCKED"),
        ("imagebuild.rocm", recipe.rocm or "none"),
        ("imagebuild.torch", recipe.wheels.version_of("torch") or "none"),
        ("imagebuild.python", recipe.python),
        ("imagebuild.gpu-targets", ",".join(recipe.gpu_targets) or "none"),
        ("imagebuild.manifest", IMAGE_MANIFEST),
    ]
    if lock is not None and lock.source_date_epoch is not None:
        # The squash step clamps every mtime to it (imagebuild.lock.epoch).
        labels.append((EPOCH_LABEL, str(lock.source_date_epoch)))
    return tuple(labels)


def _check_recipe(recipe: Recipe) -> None:
    where = display(recipe.path)
    hip: Any = recipe.components["hipblaslt"]
    tuner: Any = recipe.components.get("rccl_tuner")
    if ".." in hip.subdir.split("/"):
        raise RenderError(f"{where}: hipblaslt.subdir: "
                          f"{hip.subdir!r} leaves the checkout (no '..' parts)")
    for key, _ in recipe.env:
        if key in RESERVED_ENV:
            raise RenderError(f"{where}: env.{key}: set by imagebuild itself "
                              f"(reserved: {', '.join(RESERVED_ENV)})")
        if key == TUNER_PLUGIN_ENV and tuner is not None and tuner.enabled:
            raise RenderError(f"{where}: env.{key}: set by imagebuild itself while "
                              "rccl_tuner.enabled is true (the built tuner's path)")
        if key == TUNER_CONFIG_ENV and tuner is not None and tuner.config is not None:
            raise RenderError(f"{where}: env.{key}: set by imagebuild itself while "
                              "rccl_tuner.config names the configuration")
    for key, _ in recipe.labels:
        if key.startswith(LABEL_NAMESPACE) or key in GENERATED_OCI_LABELS:
            raise RenderError(f"{where}: labels.{key}: set by imagebuild "
                              f"itself (it owns {LABEL_NAMESPACE}* and the base-image labels)")


def _cache_scope(recipe: Recipe) -> str:
    """The base image's repository, sanitised: apt lists and ccache are only shared between
    builds on the same distribution and compilers; every ROCm release of
    rocm/dev-ubuntu-24.04 shares one, a Debian test base gets its own."""
    repository = re.split(r"[@]", recipe.base_image)[0]
    name = repository.rsplit(":", 1)[0] if ":" in repository.rsplit("/", 1)[-1] else repository
    return re.sub(r"[^a-z0-9.-]+", "-", name.lower()).strip("-")


def device_code_diet(recipe: Recipe) -> bool:
    """Whether the final stage keeps device code for gpu_targets only: images whose ROCm comes
    from the base image, which installs kernels for every architecture (the ROCm-from-wheels
    kind gets its targets' device packs alone through the extras)."""
    return recipe.rocm is not None and not recipe.rocm_wheels and bool(recipe.gpu_targets)
