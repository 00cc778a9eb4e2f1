"""What a lock pins, as frozen dataclasses: read from ``pylock.<recipe>.toml`` by
``imagebuild.lock.lockfile`` and used by render and build; and what a component asks the
lock to pin for it (``Pin``: a git source, an archive, wheels or a source archive of the
wheel index)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from imagebuild.files import sha256_file
from imagebuild.recipe.model import GitSource


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


#: A source the lock pins, by its key in ``[tool.imagebuild.sources]``.
LockedSource = LockedGit | LockedArchive


@dataclass(frozen=True)
class PinnedSource:
    """A pinned input an image component is built from, as the image's bill of materials
    lists it (imagebuild.convert.sbom)."""

    #: The component it belongs to (its name in the registry).
    component: str
    #: Its name in the SBOM: ``hipblaslt``, ``aws-ofi-nccl``, ``libfabric``.
    name: str
    #: A git commit, an archive or a source archive of the wheel index.
    pin: LockedGit | LockedArchive | LockedWheel
    #: An archive's release, when its URL does not say it.
    version: str | None = None
    #: The directory of the repository it is built from.
    subdir: str = "."


@dataclass(frozen=True)
class GitPin:
    """A git repository the lock pins to the commit its ref names (``git ls-remote``),
    recorded as ``[tool.imagebuild.sources.<key>]``."""

    key: str
    source: GitSource


@dataclass(frozen=True)
class ArchivePin:
    """An archive the lock downloads and pins by its sha256 and size, recorded as
    ``[tool.imagebuild.sources.<key>]``."""

    key: str
    url: str


@dataclass(frozen=True)
class IndexWheels:
    """Wheels of the recipe's wheel index, pinned and resolved with the image's own."""

    pins: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class IndexSdist:
    """A source archive of the recipe's wheel index that the image builds: pinned as a
    PEP 751 sdist entry, its requirements and build requirements resolved with the wheels."""

    name: str
    version: str


Pin = GitPin | ArchivePin | IndexWheels | IndexSdist


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
    #: When the lock was written (``source-date-epoch``): the SOURCE_DATE_EPOCH of every
    #: build from it (imagebuild.lock.epoch); None in locks written before it was recorded.
    source_date_epoch: int | None = None
    #: ROCm from wheels: the ``rocm`` selector sdist (installed after the wheels, its
    #: dependencies fixed by the family) and the GPU family index it was locked for.
    selector: LockedWheel | None = None
    gpu_family: str | None = None
    #: ROCm from a multi-arch index: the extras that selected device code (device-gfx942).
    device_extras: tuple[str, ...] = ()
    #: The Pythons the wheel index has every pinned wheel for (``index-pythons``; empty in
    #: locks written before it was recorded).
    index_pythons: tuple[str, ...] = ()
    #: Source archives of the wheel index built in the image (TransformerEngine's PyTorch
    #: extension).
    sdists: tuple[LockedWheel, ...] = ()
    #: The components' git sources and archives, by their key in [tool.imagebuild.sources]
    #: (``hipblaslt``, ``network-plugin``, ``libfabric``, ...), each pinned for one component.
    sources: dict[str, LockedSource] = field(default_factory=dict, hash=False)

    @property
    def base_image_pinned(self) -> str:
        """The base reference with its digest, for FROM (a tag alone can move)."""
        name = self.base_image.split("@", 1)[0]
        return f"{name}@{self.base_digest}"

    def wheel(self, name: str) -> LockedWheel | None:
        return next((w for w in self.wheels if w.name == name), None)

    def sdist(self, name: str) -> LockedWheel | None:
        return next((w for w in self.sdists if w.name == name), None)

    def git(self, key: str) -> LockedGit | None:
        found = self.sources.get(key)
        return found if isinstance(found, LockedGit) else None

    def archive(self, key: str) -> LockedArchive | None:
        found = self.sources.get(key)
        return found if isinstance(found, LockedArchive) else None

    def file_hash(self) -> str:
        return "sha256:" + sha256_file(self.path)
