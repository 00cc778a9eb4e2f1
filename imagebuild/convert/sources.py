"""Where an image comes from: its configuration and its flattened filesystem as a tar stream.

The squash and SIF stages read an image through this one seam, ``ImageSource``: the image
configuration (ENV, WORKDIR, ENTRYPOINT, CMD, labels, volumes, user) and a binary stream of
the container's flattened filesystem. Everything streams: no temporary rootfs directory and
no full tar file on disk (a ROCm PyTorch image is 26-38 GB).

Implementations: Docker (docker SDK) and podman (its CLI): create a container, never start
it, and read its files straight from the engine's storage where that works here, else
through ``docker export`` / ``podman export`` (imagebuild.convert.storage: the same bytes);
and a plain tarball (tests, and images already exported elsewhere). The engine readers are
made by the engine that holds the image (``Engine.image_source``, imagebuild.engine),
never by picking a backend here.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from imagebuild.convert import storage
from imagebuild.errors import EngineError, SquashError
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

#: A never-executed placeholder command: ``create`` refuses an image without CMD otherwise.
_PLACEHOLDER_CMD = ["/.imagebuild-export-placeholder"]
_EXPORT_CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageConfig:
    """The runtime parts of an OCI/Docker image configuration that a site runtime needs."""

    env: tuple[str, ...] = ()
    workdir: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    volumes: tuple[str, ...] = ()
    user: str = ""
    #: Image creation time (seconds since the epoch), when known. Used to clamp the mtimes of
    #: files the engine creates at container creation, so exports are reproducible.
    created: int | None = None
    #: The architecture as the image says it (``amd64``, ``arm64``).
    architecture: str = "amd64"
    #: The original configuration object, for the SIF's oci-config.json descriptor.
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_inspect(cls, attrs: Mapping[str, Any]) -> ImageConfig:
        """From ``docker image inspect`` / ``podman image inspect`` / an OCI config JSON.

        Docker and podman name the block ``Config``, the OCI image config ``config``.
        """
        config = attrs.get("Config") or attrs.get("config") or {}
        labels = config.get("Labels") or {}
        created = attrs.get("Created") or attrs.get("created")
        return cls(
            env=tuple(config.get("Env") or ()),
            workdir=config.get("WorkingDir") or "",
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
            labels=tuple(sorted((str(k), str(v)) for k, v in labels.items())),
            volumes=tuple(sorted(config.get("Volumes") or {})),
            user=config.get("User") or "",
            created=parse_timestamp(created) if created else None,
            architecture=attrs.get("Architecture") or attrs.get("architecture") or "amd64",
            raw=dict(config),
        )

    def env_dict(self) -> dict[str, str]:
        """ENV as a mapping (``KEY`` without ``=`` maps to the empty string)."""
        out: dict[str, str] = {}
        for item in self.env:
            key, _, value = item.partition("=")
            out[key] = value
        return out


_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)?$")


def parse_timestamp(text: str) -> int:
    """RFC 3339 with nanoseconds (as docker writes ``Created``) -> whole epoch seconds.

    Python 3.10's ``fromisoformat`` accepts neither ``Z`` nor nine fractional digits.
    """
    match = _TIMESTAMP.match(text.strip())
    if not match:
        raise SquashError(f"image config: Created: expected an RFC 3339 time, got {text!r}")
    zone = match.group(3) or "+00:00"
    zone = "+00:00" if zone == "Z" else zone
    stamp = datetime.fromisoformat(match.group(1) + zone)
    return int(stamp.astimezone(UTC).timestamp())


class ImageSource(Protocol):
    """Where an image's configuration and flattened filesystem come from."""

    #: What the user named (an image reference or a file), for messages and provenance.
    description: str
    #: How the last ``rootfs_tar`` read the filesystem ("docker export", ...), for reports.
    read_by: str

    def config(self) -> ImageConfig: ...

    def rootfs_tar(self) -> Any:
        """A context manager yielding a binary stream of the flattened filesystem as tar."""
        ...


class ChunkStream(io.RawIOBase):
    """A read-only binary stream over an iterator of byte chunks (docker SDK export)."""

    def __init__(self, chunks: Iterator[bytes]):
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


@dataclass(frozen=True)
class TarballSource:
    """A root filesystem tar file on disk plus the configuration that goes with it."""

    path: Path
    image_config: ImageConfig = ImageConfig()
    read_by: str = "tar file"

    @property
    def description(self) -> str:
        return str(self.path)

    def config(self) -> ImageConfig:
        return self.image_config

    @contextmanager
    def rootfs_tar(self) -> Iterator[BinaryIO]:
        if not self.path.is_file():
            raise SquashError(f"{self.path}: rootfs tarball not found")
        with open(self.path, "rb") as stream:
            yield stream


#: How an engine's image is read: ``storage`` (its files mounted here: imagebuild.convert.
#: storage), ``export`` (``docker export`` / ``podman export``), ``auto`` (storage where it
#: can be read, else export).
READ_METHODS = ("auto", "storage", "export")


def add_read_argument(parser: Any) -> None:
    """--read, as squash and build take it."""
    parser.add_argument("--read", choices=READ_METHODS, default="auto",
                        help="how the image's files are read: storage (mounted from the "
                             "engine's storage: Docker as root on overlay2, podman), export "
                             "(docker/podman export), auto (storage where it can be; default). "
                             "The same bytes either way")


class DockerSource:
    """An image in a Docker engine, read through the docker SDK: the filesystem of a
    created (never started) container, straight from overlay2 storage when that can be read
    here (imagebuild.convert.storage), else through ``docker export``: the same bytes."""

    def __init__(self, ref: str, client: Any, read: str = "auto",
                 runner: CommandRunner | None = None):
        """``client``: the docker SDK client of the engine holding the image."""
        _check_read(read)
        self.ref = ref
        self.description = ref
        self.read = read
        #: How the last ``rootfs_tar`` read the filesystem, for reports and benchmarks.
        self.read_by = ""
        self._client = client
        self._runner = runner or DEFAULT_RUNNER

    def _image(self) -> Any:
        import docker

        try:
            return self._client.images.get(self.ref)
        except docker.errors.ImageNotFound as exc:
            raise EngineError(f"docker: image {self.ref!r} not found in the engine") from exc
        except docker.errors.APIError as exc:
            raise EngineError(f"docker: inspecting image {self.ref!r} failed: {exc}") from exc

    def config(self) -> ImageConfig:
        return ImageConfig.from_inspect(self._image().attrs)

    @contextmanager
    def rootfs_tar(self) -> Iterator[BinaryIO]:
        import docker

        image = self._image()
        try:
            # The container holds the image (no `docker rmi` under the read) and its init
            # layer is what an export shows too.
            container = self._client.containers.create(
                image.id, command=_PLACEHOLDER_CMD, network_disabled=True,
                labels={"org.imagebuild.purpose": "export"},
            )
        except docker.errors.APIError as exc:
            raise EngineError(f"docker: creating a container of {self.ref!r} failed: {exc}") \
                from exc
        try:
            with storage.mountpoint() as mountpoint:
                read = _storage_read(self.read, self.ref, self._runner,
                                     lambda: self._layers(container).read(mountpoint))
                if read is not None:
                    self.read_by = read.description
                    with storage.storage_tar(read, self.ref, self._runner) as stream:
                        yield stream
                    return
            self.read_by = "docker export"
            with self._export(container) as stream:
                yield stream
        finally:
            try:
                container.remove(force=True)
            except docker.errors.APIError:
                pass  # the result stands; a stray stopped container is harmless

    def _layers(self, container: Any) -> storage.OverlayLayers:
        graph_driver = container.attrs.get("GraphDriver") or {}
        if graph_driver.get("Name") != "overlay2":  # no need to ask the daemon more
            return storage.overlay_layers(graph_driver)
        info = self._client.info()
        return storage.overlay_layers(graph_driver,
                                      security_options=info.get("SecurityOptions") or ())

    @contextmanager
    def _export(self, container: Any) -> Iterator[BinaryIO]:
        import docker
        import requests

        def guarded(stream: Iterator[bytes]) -> Iterator[bytes]:
            try:
                yield from stream
            except (requests.RequestException, docker.errors.APIError) as exc:
                raise EngineError(f"docker: exporting {self.ref!r} broke off: {exc}") from exc

        try:
            chunks = container.export(chunk_size=_EXPORT_CHUNK)
        except (requests.RequestException, docker.errors.APIError) as exc:
            raise EngineError(f"docker: exporting {self.ref!r} failed: {exc}") from exc
        try:
            yield io.BufferedReader(ChunkStream(guarded(chunks)), buffer_size=_EXPORT_CHUNK)
        finally:
            # Closing the generator drops the HTTP stream if we stopped early (error, Ctrl-C).
            if hasattr(chunks, "close"):
                chunks.close()


class PodmanSource:
    """An image in podman's storage, read through the podman CLI (no daemon needed): the
    filesystem of a created (never started) container, from ``podman mount`` where that
    works here (imagebuild.convert.storage), else through ``podman export``: the same
    bytes."""

    def __init__(self, ref: str, podman: str, runner: CommandRunner | None = None,
                 read: str = "auto"):
        """``podman``: the podman binary of the engine holding the image."""
        _check_read(read)
        self.ref = ref
        self.description = ref
        self.read = read
        self.read_by = ""
        self._podman = podman
        self._runner = runner or DEFAULT_RUNNER

    def _run(self, *args: str) -> str:
        result = self._runner.capture([self._podman, *args], step=f"podman {args[0]}",
                                      check=False)
        if result.returncode != 0:
            detail = result.stderr.strip().splitlines()[-1:] or ["no output"]
            raise EngineError(f"podman {args[0]} {self.ref}: {detail[0]}")
        return result.stdout

    def config(self) -> ImageConfig:
        data = json.loads(self._run("image", "inspect", self.ref))
        return ImageConfig.from_inspect(data[0])

    @contextmanager
    def rootfs_tar(self) -> Iterator[BinaryIO]:
        container = self._run("create", self.ref, *_PLACEHOLDER_CMD).strip().splitlines()[-1]
        try:
            read = _storage_read(self.read, self.ref, self._runner,
                                 lambda: storage.podman_read(self._podman, container,
                                                             rootless=os.geteuid() != 0))
            if read is not None:
                self.read_by = read.description
                with storage.storage_tar(read, self.ref, self._runner) as stream:
                    yield stream
            else:
                self.read_by = "podman export"
                with self._export(container) as stream:
                    yield stream
        finally:
            self._runner.capture([self._podman, "rm", "-f", container], step="podman rm",
                                 check=False)

    @contextmanager
    def _export(self, container: str) -> Iterator[BinaryIO]:
        # The runner stops the export (its whole process group) if the reader stops early:
        # a failed squash tool, Ctrl-C.
        with tempfile.TemporaryFile() as stderr, \
                self._runner.spawn([self._podman, "export", container],
                                   stdout=subprocess.PIPE, stderr=stderr) as proc:
            assert proc.stdout is not None
            stream = proc.stdout.raw  # type: ignore[attr-defined]  # unread: exact, spliceable
            yield stream
            while stream.read(1 << 16):
                pass
            proc.stdout.close()
            returncode = proc.wait()
            stderr.seek(0)
            said = stderr.read().decode(errors="replace")
        if returncode != 0:
            raise EngineError(f"podman export {self.ref}: {said.strip() or 'failed'}")


def _check_read(read: str) -> None:
    if read not in READ_METHODS:
        raise EngineError(f"--read: expected one of {', '.join(READ_METHODS)}, got {read!r}")


def _storage_read(read: str, ref: str, runner: CommandRunner,
                  make: Callable[[], storage.StorageRead]) -> storage.StorageRead | None:
    """How to read ``ref`` from storage, or None for the export: ``auto`` falls back when
    storage cannot be read here, ``storage`` says why."""
    if read == "export":
        return None
    try:
        chosen = make()
        storage.probe(chosen, runner)
        return chosen
    except storage.StorageUnavailable as exc:
        if read == "storage":
            raise EngineError(f"--read storage: cannot read {ref} from the engine's storage: "
                              f"{exc}", hint="--read export (or auto) reads it through the "
                              "engine") from exc
        return None
