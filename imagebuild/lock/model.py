"""What a lock pins, as frozen dataclasses: read from ``pylock.<recipe>.toml`` by
``imagebuild.lock.lockfile`` and used by render and build."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from imagebuild.files import sha256_file


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    url: str
    sha256: str
    size: int | None

    @property
    def filename(self) -> str:
        return unquote(urlsplit(self.url).path.rsplit("/", 1)[-1])


@dataclass(frozen=True)
class LockedGit:
    repository: str
    ref: str
    commit: str


@dataclass(frozen=True)
class LockedArchive:
    url: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Lock:
    """What a recipe's lock pins: every byte a build uses (pylock.<recipe>.toml)."""

    recipe: str
    path: Path
    #: ``Recipe.lock_input_hash()`` when the lock was written; differs -> the lock is stale.
    input_hash: str
    python: str
    base_image: str
    base_digest: str
    wheels: tuple[LockedWheel, ...]
    hipblaslt: LockedGit | None
    network_plugin: LockedGit | None
    libfabric: LockedArchive | None
    #: When the lock was written (``source-date-epoch``): the SOURCE_DATE_EPOCH of every
    #: build from it (imagebuild.lock.epoch); None in locks written before it was recorded.
    source_date_epoch: int | None = None
    #: ROCm from wheels: the ``rocm`` selector sdist (installed after the wheels, its
    #: dependencies fixed by the family) and the GPU family index it was locked for.
    selector: LockedWheel | None = None
    gpu_family: str | None = None
    #: ROCm from a multi-arch index: the extras that selected device code (device-gfx942).
    device_extras: tuple[str, ...] = ()
    #: Megatron-LM's repository and commit, when the recipe has it.
    megatron: LockedGit | None = None
    #: ROCm/rccl-tests' repository and commit, when the recipe has it.
    rccl_tests: LockedGit | None = None
    #: Source archives built in the image (TransformerEngine's PyTorch extension).
    sdists: tuple[LockedWheel, ...] = ()

    @property
    def base_image_pinned(self) -> str:
        """The base reference with its digest, for FROM (a tag alone can move)."""
        name = self.base_image.split("@", 1)[0]
        return f"{name}@{self.base_digest}"

    def wheel(self, name: str) -> LockedWheel | None:
        return next((w for w in self.wheels if w.name == name), None)

    def sdist(self, name: str) -> LockedWheel | None:
        return next((w for w in self.sdists if w.name == name), None)

    def file_hash(self) -> str:
        return "sha256:" + sha256_file(self.path)
