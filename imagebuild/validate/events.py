"""The runner's output as it comes back from any launcher: JSON event lines and the rest.

Every launcher runs the in-image runner with ``--events --report -``: progress and the
final report arrive as lines prefixed with checks.report.EVENT_PREFIX on stdout, so no
file has to travel out of a container.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from imagebuild.inimage.run_report import EVENT_PREFIX

Event = dict[str, Any]
EventCallback = Callable[[Event], None]
LineCallback = Callable[[str], None]


class EventStream:
    """Splits a byte/text stream into lines; event lines go to ``on_event``, others to
    ``on_line``. Remembers the report event and the last lines of other output."""

    def __init__(self, on_event: EventCallback | None = None, on_line: LineCallback | None = None,
                 keep: int = 40):
        self.on_event = on_event
        self.on_line = on_line
        self.report: dict[str, Any] | None = None
        self.tail: list[str] = []
        self._keep = keep
        self._buffer = ""

    def feed(self, chunk: bytes | str) -> None:
        text = chunk.decode(errors="replace") if isinstance(chunk, bytes) else chunk
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self.line(line)

    def close(self) -> None:
        if self._buffer:
            self.line(self._buffer)
            self._buffer = ""

    def line(self, line: str) -> None:
        line = line.rstrip("\r")
        if line.startswith(EVENT_PREFIX):
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except ValueError:
                event = None
            if isinstance(event, dict):
                if event.get("event") == "report":
                    self.report = event.get("report")
                if self.on_event:
                    self.on_event(event)
                return
        self.tail = (self.tail + [line])[-self._keep:]
        if self.on_line:
            self.on_line(line)


def stream_command(argv: Sequence[str], stream: EventStream, env: Mapping[str, str] | None,
                   runner: Any = None) -> int:
    """Run ``argv`` through the one process runner, its output lines into ``stream``."""
    from imagebuild.process import CommandRunner

    runner = runner or CommandRunner()
    result = runner.run(argv, env=env, on_line=stream.line, keep_lines=1)
    return result.returncode
