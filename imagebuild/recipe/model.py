"""The recipe as frozen dataclasses, the input of every later stage.

A recipe is data: these classes hold already-validated values, so later
stages never re-check grammar. ``imagebuild.recipe.load`` is the only place that builds a Recipe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from imagebuild.files import canonical_digest

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


class Section(Protocol):
    """A component's recipe section, as its component types it (imagebuild.components)."""

    @property
    def enabled(self) -> bool: ...

    def lock_inputs(self) -> dict[str, Any]:
        """What a lock of the recipe depends on in this section, under the lock-input keys
        it names (none: the section changes no lock)."""
        ...


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
    #: ROCm from wheels: the index layout, and on a multi-arch index the extras that select
    #: device code for gpu_targets (device-gfx942, ...).
    wheel_layout: WheelLayout | None = None
    device_extras: tuple[str, ...] = ()
    #: Targets TheRock does not release-test that the recipe accepts (gfx90a).
    accept_untested_targets: tuple[str, ...] = ()
    #: The components' sections by component name, in the registry's order: each section
    #: that is on, and the sections of the first recipe format (hipblaslt, network_plugin)
    #: when off too; a section added to the format later is absent when off, so recipes
    #: written before it keep their hashes.
    components: dict[str, Section] = field(default_factory=dict, hash=False)
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
        data.update(data.pop("components"))  # each section under its own key, as written
        data["wheels"]["pinned"] = dict(self.wheels.pinned)
        data["env"] = dict(self.env)
        data["labels"] = dict(self.labels)
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
            # A section absent from the recipe adds nothing: locks of recipes without it
            # stay valid.
            **{key: value for section in self.components.values()
               for key, value in section.lock_inputs().items()},
            **({"rocm_from": "wheels", "gpu_family": self.gpu_family}
               if self.rocm_wheels and not self.multi_arch else {}),
            **({"rocm_from": "wheels", "wheel_layout": "multi-arch",
                "device_extras": list(self.device_extras)} if self.multi_arch else {}),
        }

    def lock_input_hash(self) -> str:
        return canonical_digest(self.lock_inputs())

    def with_component(self, name: str, section: Section | None) -> Recipe:
        """The recipe with component ``name``'s section replaced (None: removed)."""
        components = {key: value for key, value in self.components.items() if key != name}
        if section is not None:
            components[name] = section
        return replace(self, components=components)


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
