"""The recipe as frozen dataclasses, the input of every later stage.

A recipe is data: these classes hold already-validated values, so later
stages never re-check grammar. ``imagebuild.recipe.load`` is the only place that builds a Recipe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from imagebuild.files import canonical_digest

PluginKind = Literal["aws-ofi-nccl", "aws-ofi-rccl"]
#: Where ROCm comes from: the base image (AMD's rocm/dev-* images), or Python wheels on a
#: TheRock PEP 503 index (rocm-sdk-core and the libraries with their device code).
RocmFrom = Literal["base_image", "wheels"]
#: How a TheRock index is laid out (imagebuild.recipe.gpu_family): one index for all GPUs
#: with device code selected by extras, or one per GPU family (legacy).
WheelLayout = Literal["multi-arch", "per-family"]

#: Where repo.radeon.com keeps the wheels of one ROCm release (flat
#: HTML listings, one directory per patch release).
RADEON_INDEX = "https://repo.radeon.com/rocm/manylinux/rocm-rel-{rocm}/"
#: TheRock's legacy release indexes, one PEP 503 simple index per GPU family
#: (https://github.com/ROCm/TheRock/blob/main/RELEASES.md); the 7.14 and 10.x lines publish
#: multi-arch indexes instead (imagebuild.recipe.gpu_family.MULTI_ARCH_INDEXES).
ROCM_WHEELS_INDEX = "https://repo.amd.com/rocm/whl/{family}/"
#: The selector sdist that pulls the ROCm wheels (torch requires rocm[libraries]==<ROCm>).
ROCM_SELECTOR = "rocm"


@dataclass(frozen=True)
class Wheels:
    """The Python environment: exact ROCm wheels from the index, extra PyPI requirements."""

    index_url: str
    #: normalized project name -> exact version, local part included (one build of many).
    pinned: tuple[tuple[str, str], ...]
    #: PEP 508 requirement strings resolved from PyPI (transitive deps are always locked).
    extra: tuple[str, ...] = ()

    def as_requirements(self) -> list[str]:
        return [f"{name}=={version}" for name, version in self.pinned] + list(self.extra)

    def version_of(self, name: str) -> str | None:
        return dict(self.pinned).get(name)


@dataclass(frozen=True)
class GitSource:
    repository: str
    ref: str


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


@dataclass(frozen=True)
class Megatron:
    """Megatron-LM at a commit (ROCm/Megatron-LM, NVIDIA/Megatron-LM or a fork such as
    swiss-ai/Megatron-LM) and the PyPI projects it imports, locked with the wheels."""

    enabled: bool
    source: GitSource
    requirements: tuple[str, ...] = ()


@dataclass(frozen=True)
class RcclTests:
    """ROCm/rccl-tests at a commit: the ``*_perf`` collective benchmarks, built for the
    recipe's gpu_targets against the image's RCCL."""

    enabled: bool
    source: GitSource


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


#: repo.radeon.com's TransformerEngine for ROCm (ROCm/TransformerEngine README, "from ROCm
#: 7.0 ... manylinux wheels"): the Python package and the common library as wheels, the
#: PyTorch extension as a source archive compiled against the installed torch.
TE_WHEELS = ("transformer-engine", "transformer-engine-rocm")
TE_TORCH_SDIST = "transformer-engine-torch"


@dataclass(frozen=True)
class TransformerEngine:
    enabled: bool
    version: str = ""

    def wheel_pins(self) -> tuple[tuple[str, str], ...]:
        return tuple((name, self.version) for name in TE_WHEELS) if self.enabled else ()


@dataclass(frozen=True)
class Recipe:
    """One image, fully merged (``extends`` resolved) and validated."""

    name: str
    path: Path
    format_version: int
    description: str
    #: ROCm release, e.g. "7.0.2"; None for a CPU-only image (the end-to-end test recipe).
    rocm: str | None
    base_image: str
    os_packages: tuple[str, ...]
    #: Where ROCm is installed in the base image: /opt/rocm for AMD's images, /usr for
    #: Debian's own HIP and RCCL packages. The source builds configure against it.
    rocm_prefix: str
    #: OS packages of the toolchain stage (build stages only, never in the final image).
    build_packages: tuple[str, ...]
    #: Site profiles the image is made for: their libfabric policy constrains the plugin.
    sites: tuple[str, ...]
    python: str
    wheels: Wheels
    gpu_targets: tuple[str, ...]
    hipblaslt: HipBlasLt
    network_plugin: NetworkPlugin
    env: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, str], ...]
    #: BuildKit frontend for the ``# syntax=`` line; None means the engine's built-in one
    #: (air-gapped sites and this project's CI cannot pull docker/dockerfile images).
    dockerfile_syntax: str | None
    #: Files this recipe was merged from, child first (for provenance headers and ci/).
    sources: tuple[Path, ...] = field(default=())
    rocm_from: RocmFrom = "base_image"
    #: The family index of gpu_targets (e.g. gfx94X-dcgpu) when ROCm comes from wheels.
    gpu_family: str | None = None
    megatron: Megatron = Megatron(False, GitSource("", ""))
    transformer_engine: TransformerEngine = TransformerEngine(False)
    rccl_tests: RcclTests = RcclTests(False, GitSource("", ""))
    rccl_tuner: RcclTuner = RcclTuner(False)
    #: ROCm from wheels: the index layout, and on a multi-arch index the extras that select
    #: device code for gpu_targets (device-gfx942, ...).
    wheel_layout: WheelLayout | None = None
    device_extras: tuple[str, ...] = ()
    #: Targets TheRock does not release-test that the recipe accepts (gfx90a).
    accept_untested_targets: tuple[str, ...] = ()
    #: The merged recipe in the recipe's own keys, defaults filled in (what ``show``
    #: prints: every key of it is one a recipe may write); not part of the input hash.
    as_written: dict[str, Any] = field(default_factory=dict, compare=False, hash=False,
                                       repr=False)

    @property
    def rocm_wheels(self) -> bool:
        return self.rocm_from == "wheels"

    @property
    def multi_arch(self) -> bool:
        return self.wheel_layout == "multi-arch"

    @property
    def cpu_only(self) -> bool:
        return self.rocm is None

    def to_dict(self) -> dict[str, Any]:
        """The merged recipe as plain data, in a stable order (``show``, hashing)."""
        data = asdict(self)
        data.pop("path")
        data.pop("sources")
        data.pop("as_written")
        data["wheels"]["pinned"] = dict(self.wheels.pinned)
        data["env"] = dict(self.env)
        data["labels"] = dict(self.labels)
        # Sections added after the first recipes: absent rather than disabled, so recipes
        # without them keep their input hashes.
        for key in ("megatron", "transformer_engine", "rccl_tests", "rccl_tuner"):
            if not getattr(self, key).enabled:
                data.pop(key)
        for key in ("wheel_layout", "device_extras", "accept_untested_targets"):
            if not data[key]:
                data.pop(key)
        return _jsonable(data)

    def input_hash(self) -> str:
        """Hash of everything the recipe says: any change makes its generated files stale."""
        return canonical_digest(self.to_dict())

    def lock_inputs(self) -> dict[str, Any]:
        """The part of the recipe a lock depends on; env or label edits leave locks valid."""
        data = self.to_dict()
        return {
            "base_image": data["base_image"],
            "python": data["python"],
            "rocm": data["rocm"],
            "wheels": data["wheels"],
            "hipblaslt": data["hipblaslt"]["source"] if self.hipblaslt.enabled else None,
            "network_plugin": (
                {"source": data["network_plugin"]["source"],
                 "libfabric": data["network_plugin"]["libfabric"]}
                if self.network_plugin.enabled else None
            ),
            # Only when set: locks of recipes without these stay valid.
            **({"megatron": data["megatron"]["source"]} if self.megatron.enabled else {}),
            **({"rccl_tests": data["rccl_tests"]["source"]} if self.rccl_tests.enabled else {}),
            **({"transformer_engine": data["transformer_engine"]["version"]}
               if self.transformer_engine.enabled else {}),
            **({"rocm_from": "wheels", "gpu_family": self.gpu_family}
               if self.rocm_wheels and not self.multi_arch else {}),
            **({"rocm_from": "wheels", "wheel_layout": "multi-arch",
                "device_extras": list(self.device_extras)} if self.multi_arch else {}),
        }

    def lock_input_hash(self) -> str:
        return canonical_digest(self.lock_inputs())


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def short_hash(digest: str, length: int = 12) -> str:
    """``sha256:abcdef...`` -> ``abcdef012345`` (image tags, file headers)."""
    return digest.split(":", 1)[-1][:length]
