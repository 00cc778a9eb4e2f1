"""What every container engine offers: the ``Engine`` interface and a backend-neutral build.

An ``Engine`` builds through its CLI (the docker SDK has no BuildKit) and manages images
(inspect, tag, remove, push, run). ``imagebuild.engine.docker`` and
``imagebuild.engine.podman`` implement it; ``imagebuild.engine.select`` picks one. Every
external process an engine starts goes through its ``CommandRunner``, so unit tests replace
the runner and integration tests use the real engines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagebuild.images import normalize_image_id
from imagebuild.process import CommandResult, CommandRunner, LineCallback


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


@dataclass(frozen=True)
class RunResult:
    exit_code: int
    output: str


class Engine(ABC):
    """A container engine: builds via its CLI, manages images."""

    #: "docker" or "podman"
    backend: str
    #: which progress format ``build`` emits: "buildkit" or "podman"
    progress_format: str

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

    @abstractmethod
    def tag(self, source: str, target: str) -> None: ...

    @abstractmethod
    def remove(self, ref: str) -> None:
        """Remove one reference (the image goes only when no other tag names it)."""

    @abstractmethod
    def push(self, ref: str) -> str:
        """Push ``ref`` (which names its registry); returns the pushed manifest digest."""

    @abstractmethod
    def run(self, ref: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str = "host", user: str | None = None) -> RunResult:
        """Run a short command in a throwaway container; returns exit code and output."""



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

