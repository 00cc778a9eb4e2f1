"""Test doubles at the engine seam: an Engine that replays captured build output."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from imagebuild.convert.sources import ImageSource
from imagebuild.engine.base import BuildRequest, ContainerSpec, Engine, OutputCallback, RunResult
from imagebuild.errors import EngineError
from imagebuild.process import CommandResult


class ReplayEngine(Engine):
    """Each build replays the next scripted (lines, exit code); images live in a dict."""

    backend = "docker"
    progress_format = "buildkit"

    def __init__(self, script: Sequence[tuple[list[str], int]],
                 during_build: Callable[[], None] | None = None):
        super().__init__(runner=None)
        self.script = list(script)
        self.requests: list[BuildRequest] = []
        self.images: dict[str, str] = {}  # ref -> image id
        self.during_build = during_build

    def describe(self) -> str:
        return "replay engine"

    def build_command(self, request: BuildRequest):
        return ["replay", "build", str(request.context)], {}

    def build(self, request, on_line=None, keep_lines=2000) -> CommandResult:
        self.requests.append(request)
        lines, code = self.script.pop(0)
        for line in lines:
            if on_line:
                on_line(line)
        if self.during_build:
            self.during_build()
        if code == 0 and request.iidfile:
            request.iidfile.write_text(f"sha256:{len(self.requests):064x}")
        return CommandResult(("replay",), code, "\n".join(lines))

    def inspect(self, ref: str) -> dict[str, Any]:
        if ref not in self.images and ref not in self.images.values():
            raise EngineError(f"image {ref} not found")
        return {"Id": self.images.get(ref, ref), "Config": {"Labels": {}}}

    def image_exists(self, ref: str) -> bool:
        return ref in self.images

    def tag(self, source: str, target: str) -> None:
        self.images[target] = self.images.get(source, source)

    def remove(self, ref: str) -> None:
        self.images.pop(ref, None)

    def list_images(self, repository: str) -> list:
        raise NotImplementedError

    def push(self, ref: str) -> str:
        return "sha256:" + "ab" * 32

    def run(self, ref: str, command: Sequence[str], *, env: Mapping[str, str] | None = None,
            network: str = "host", user: str | None = None) -> RunResult:
        return RunResult(0, "")

    def run_container(self, spec: ContainerSpec, on_output: OutputCallback) -> int:
        return 0

    def image_source(self, ref: str, read: str = "auto") -> ImageSource:
        raise EngineError(f"replay engine: no image files to read for {ref}")


def log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()
