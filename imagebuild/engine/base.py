"""What every container engine offers: the ``Engine`` interface and a backend-neutral build.

An ``Engine`` builds through its CLI (the docker SDK has no BuildKit), reads an image
(``image_source``: its configuration and flattened filesystem, for the convert stage),
manages images (inspect, tag, remove, push) and runs containers (``run`` for a short
command, ``run_container`` for the validation checks). ``imagebuild.engine.docker`` and
``imagebuild.engine.podman`` implement it; ``imagebuild.engine.select`` opens and picks one,
and nothing else asks which backend an engine is. Every external process an engine starts
goes through its ``CommandRunner``, so unit tests replace the runner and integration tests
use the real engines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagebuild.images import normalize_image_id
from imagebuild.process import CommandResult, CommandRunner, LineCallback

if TYPE_CHECKING:
    from imagebuild.convert.sources import ImageConfig, ImageSource
    from imagebuild.engine.cache import RegistryCache

#: Receives a container's output as it comes (bytes, not split into lines).
OutputCallback = Callable[[bytes], None]


@dataclass(frozen=True)
class ListedImage:
    """One tag an engine holds."""

    ref: str
    image_id: str
    size: int  # bytes the image takes, shared layers counted in full


@dataclass(frozen=True)
class BuildRequest:
    """One image build, backend-neutral. Secrets are files passed as BuildKit secrets."""

    dockerfile: Path
    context: Path
    tags: tuple[str, ...] = ()
    target: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict)
    #: secret id -> file on the host, mounted with ``RUN --mount=type=secret,id=...``.
    secrets: Mapping[str, Path] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    network: str | None = "host"
    no_cache: bool = False
    #: file the engine writes the built image id into.
    iidfile: Path | None = None
    #: earlier results of the stages, in a registry (imagebuild.engine.cache)
    cache: RegistryCache | None = None
    #: attach BuildKit's SLSA provenance attestation (only where ``attestation_problem``
    #: is None)
    provenance: bool = False


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str


@dataclass(frozen=True)
class Mount:
    """A host path bound into a container."""

    source: str
    target: str
    read_only: bool = False


#: What ``ContainerSpec.gpus`` may ask for: AMD (/dev/kfd and /dev/dri), NVIDIA, none.
GPU_KINDS = ("rocm", "nvidia", "none")


@dataclass(frozen=True)
class ContainerSpec:
    """One container run to completion with its output streamed back (the validation
    checks): backend-neutral; each engine says how it passes devices and groups.

    The container shares the host's network (NCCL/gloo rendezvous and RDMA NICs as on the
    host) and IPC namespace (NCCL and RCCL use /dev/shm between ranks; docker's default
    64 MB is too small)."""

    image: str
    #: the first words of the command line: the image's entrypoint is replaced by them
    entrypoint: tuple[str, ...]
    #: the rest of the command line
    command: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    gpus: str = "none"


class Engine(ABC):
    """A container engine: builds via its CLI, manages images."""

    #: "docker" or "podman"
    backend: str
    #: which progress format ``build`` emits: "buildkit" or "podman"
    progress_format: str
    #: why ``auto`` chose this engine over the one it prefers ("" when it is the first)
    selection_note: str = ""

    def __init__(self, runner: CommandRunner | None = None):
        self.runner = runner or CommandRunner()

    @abstractmethod
    def describe(self) -> str:
        """One line naming the engine and binary, for logs and error messages."""

    @abstractmethod
    def build_command(self, request: BuildRequest) -> tuple[list[str], dict[str, str]]:
        """The build command line and its environment."""

    def build(self, request: BuildRequest, on_line: LineCallback | None = None,
              keep_lines: int | None = 2000) -> CommandResult:
        argv, env = self.build_command(request)
        return self.runner.run(argv, env=env, on_line=on_line, keep_lines=keep_lines)

    def registry_cache_problem(self) -> str | None:
        """Why this engine cannot keep a build cache in a registry (None: it can)."""
        return f"{self.describe()} keeps no build cache in a registry"

    def attestation_problem(self) -> str | None:
        """Why this engine attaches no provenance attestation to what it builds (None: it
        does, with ``BuildRequest.provenance``)."""
        return f"{self.describe()} makes no provenance attestations"

    def cache_export_commands(self, request: BuildRequest
                              ) -> list[tuple[str, list[str], dict[str, str]]]:
        """After ``request`` built: (stage, command line, environment) of each export of
        its registry cache still to run. Empty where the build pushed its cache itself."""
        return []

    @abstractmethod
    def inspect(self, ref: str) -> dict[str, Any]:
        """The engine's image inspect document; EngineError if the image does not exist."""

    @abstractmethod
    def image_exists(self, ref: str) -> bool: ...

    def image_id(self, ref: str) -> str:
        return normalize_image_id(self.inspect(ref)["Id"])

    def image_labels(self, ref: str) -> dict[str, str]:
        config = self.inspect(ref).get("Config") or {}
        return dict(config.get("Labels") or {})

    def image_config(self, ref: str) -> ImageConfig:
        """The runtime parts of ``ref``'s configuration (ENV, WORKDIR, labels, created)."""
        from imagebuild.convert.sources import ImageConfig

        return ImageConfig.from_inspect(self.inspect(ref))

    @abstractmethod
    def tag(self, source: str, target: str) -> None: ...

    @abstractmethod
    def remove(self, ref: str) -> None:
        """Remove one reference (the image goes only when no other tag names it)."""

    @abstractmethod
    def list_images(self, repository: str) -> list[ListedImage]:
        """Every tag of ``repository`` (e.g. ``imagebuild/rocm-7.0.2``): reference, id,
        size."""

    @abstractmethod
    def push(self, ref: str) -> str:
        """Push ``ref`` (which names its registry); returns the pushed manifest digest."""

    @abstractmethod
    def run(self, ref: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str = "host", user: str | None = None) -> RunResult:
        """Run a short command in a throwaway container; returns exit code and output."""

    @abstractmethod
    def run_container(self, spec: ContainerSpec, on_output: OutputCallback) -> int:
        """Run ``spec`` to completion, its output to ``on_output``; returns the exit code.
        The container is removed afterwards, also on Ctrl-C."""

    @abstractmethod
    def image_source(self, ref: str, read: str = "auto") -> ImageSource:
        """The image ``ref`` as the convert stage reads it: configuration and flattened
        filesystem. ``read``: ``storage``, ``export`` or ``auto``
        (imagebuild.convert.sources.READ_METHODS)."""

    def daemon_ref(self, ref: str) -> str | None:
        """The reference apptainer can build a SIF from straight out of this engine
        (``docker-daemon:``), or None where it cannot."""
        return None



def build_flags(request: BuildRequest) -> list[str]:
    """Flags shared by ``docker build``, ``docker buildx build`` and ``podman build``."""
    flags = ["-f", str(request.dockerfile)]
    for tag in request.tags:
        flags += ["-t", tag]
    if request.target:
        flags += ["--target", request.target]
    for key, value in sorted(request.build_args.items()):
        flags += ["--build-arg", f"{key}={value}"]
    for key, value in sorted(request.labels.items()):
        flags += ["--label", f"{key}={value}"]
    for secret_id, path in sorted(request.secrets.items()):
        flags += ["--secret", f"id={secret_id},src={path}"]
    if request.network:
        flags += ["--network", request.network]
    if request.no_cache:
        flags.append("--no-cache")
    if request.iidfile:
        flags += ["--iidfile", str(request.iidfile)]
    return flags


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"

