"""Build progress: parse BuildKit / podman build output into events; show them.

``BuildLogParser`` is pure (no clock, no I/O): it turns the lines a build prints into
``BuildEvent``s and remembers each step's output tail, so a failure can name the failing
step and show what it printed. Formats, from real output captured with docker 20.10's
built-in BuildKit and podman 4.3 (tests/engine/data/):

  BuildKit ``--progress=plain``::

    #6 [broken 1/2] RUN make            step header (repeated when output resumes)
    #6 0.023 cc -c foo.c                output, seconds since the step started
    #6 CACHED | #6 DONE 1.2s | #6 ...   cached, done, interleaved with another step
    #6 ERROR: executor failed running [/bin/sh -c make]: exit code: 2
    failed to solve with frontend dockerfile.v0: ...        (final summary, no #N)
    #4 importing cache manifest from R  a --cache-from entry; its ERROR (not found) is no failure
    #6 sha256:c57e... 109B / 109B done  | #6 extracting sha256:c57e...
                                        a layer pulled for the step: from a registry
                                        cache (--cache-from), or the base image (FROM)

  podman / buildah::

    [2/2] STEP 2/3: RUN make            ([stage/stages] only in multi-stage builds)
    --> Cache pulled from remote R:KEY  pulled from a registry cache (--cache-from)
    --> Using cache 5ac57fa1989...      cached
    --> 5ac57fa1989                     step committed
    Error: building at STEP "RUN make": while running runtime: exit status 2

``ProgressDisplay`` renders events: a rich live line on a terminal (stage, step, elapsed,
cached count, last output line), one plain line per step otherwise (CI logs).
"""

from __future__ import annotations

import re
import sys
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rich.live import Live

EventKind = Literal["step", "output", "cached", "pulled", "done", "error"]
ProgressFormat = Literal["buildkit", "podman"]

#: How many output lines of each step are kept for the failure message.
TAIL_LINES = 25
#: How many earlier error-looking lines are kept beside the tail.
ERROR_LINES = 5
#: The widest a step is named in a log line (the instruction is cut, not wrapped).
LABEL_WIDTH = 100
_ERRORISH = re.compile(r"\berror\b|\bfatal\b|\bfailed\b|\*\*\*", re.IGNORECASE)
#: The engines' failure lines repeat the step's whole command (a ROCm RUN line is ~1,000
#: characters); the step is already named, so only the exit code is news. Newer BuildKit:
#: `process "/bin/sh -c <RUN line>" did not complete successfully: exit code: 2`; the older
#: one in Debian's Docker 20.10: `executor failed running [/bin/sh -c <RUN line>]: exit
#: code: 1`; podman: `building at STEP "RUN <line>": while running runtime: exit status 1`
#: (both captured in tests/engine/data/*-failing.log).
_PROCESS_FAILED = (
    re.compile(r'process "(?:[^"\\]|\\.)*" did not complete successfully: (exit code: \d+)',
               re.DOTALL),
    re.compile(r"executor failed running \[.*\]: (exit code: \d+)", re.DOTALL),
    re.compile(r'building at STEP ".*": while running runtime: (exit status \d+)', re.DOTALL),
)


def concise_error(text: str) -> str:
    """An engine's error line without the command it repeats."""
    for pattern in _PROCESS_FAILED:
        text = pattern.sub(r"the command failed (\1)", text)
    return text


@dataclass(frozen=True)
class BuildEvent:
    kind: EventKind
    #: BuildKit vertex number, or "<stage index>.<step>" for podman.
    step_id: str
    #: the step as the engine names it: "[builder 2/4] RUN make" / "[2/2] STEP 2/3: RUN make"
    name: str
    stage: str | None = None
    #: "2/4": position within the stage
    step: str | None = None
    instruction: str | None = None
    #: seconds, when the engine reports it (BuildKit DONE lines)
    elapsed: float | None = None
    #: an output line, or the error message
    text: str = ""

    @property
    def label(self) -> str:
        """Short human name: "builder 2/4: RUN make"."""
        if self.step and self.instruction:
            prefix = f"{self.stage} {self.step}" if self.stage else self.step
            return f"{prefix}: {self.instruction}"
        return self.name

    @property
    def short_label(self) -> str:
        """The label's first line, cut to LABEL_WIDTH: a RUN instruction is often a
        thousand characters, and a log line per step must stay one readable line."""
        first = self.label.splitlines()[0] if self.label else ""
        return first if len(first) <= LABEL_WIDTH else first[:LABEL_WIDTH - 3] + "..."


@dataclass(frozen=True)
class BuildFailure:
    """What went wrong: the failing step (None when the build failed before any step)."""

    step: str | None
    #: the last lines that step printed, then the engine's error line(s)
    tail: tuple[str, ...]
    message: str

    @property
    def text(self) -> str:
        return "\n".join((*self.tail, self.message))


@dataclass
class _Step:
    step_id: str
    name: str
    stage: str | None
    step: str | None
    instruction: str | None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    #: (line number, text) of the last lines that look like errors: a compiler's first
    #: "error:" often scrolls out of the tail (make keeps printing, and stderr lines may
    #: arrive before buffered stdout), yet it is the line the user needs.
    errors: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=ERROR_LINES))
    count: int = 0

    def add(self, text: str) -> None:
        self.tail.append(text)
        if _ERRORISH.search(text):
            self.errors.append((self.count, text))
        self.count += 1

    def excerpt(self) -> tuple[str, ...]:
        """Error-looking lines from before the tail, then the tail itself."""
        first_in_tail = self.count - len(self.tail)
        earlier = [text for number, text in self.errors if number < first_in_tail]
        if not earlier:
            return tuple(self.tail)
        return (*earlier, f"[... {first_in_tail - len(earlier)} more lines ...]", *self.tail)


_BK_LINE = re.compile(r"^#(?P<id>\d+) (?P<rest>.*)$")
_BK_OUTPUT = re.compile(r"^(?P<secs>\d+\.\d+) (?P<text>.*)$")
_BK_DONE = re.compile(r"^DONE (?P<secs>\d+(?:\.\d+)?)s$")
_BK_NAME = re.compile(r"^\[(?:(?P<stage>[^\]\s]+)\s+)?(?P<step>\d+/\d+)\] (?P<instr>.*)$")
_BK_INTERNAL = re.compile(r"^\[(?P<stage>internal)\] (?P<instr>.*)$")
# BuildKit's step that reads one --cache-from entry; its ERROR (no such entry yet) is not
# the build's failure.
_BK_CACHE_IMPORT = "importing cache manifest from "
# A layer of the step downloaded or unpacked: the step's result came from a registry.
_BK_PULLED = re.compile(r"^(sha256:[0-9a-f]{64} .*done$|extracting sha256:[0-9a-f]{64}$)")
# Lines BuildKit prints about a vertex that are neither output nor a new name.
_BK_NOISE = re.compile(r"^(sha256:[0-9a-f]{64}|\.\.\.|extracting |resolve |transferring |"
                       r"exporting |writing image |naming to |unpacking |preparing )")

_PM_STEP = re.compile(r"^(?:\[(?P<stage>\d+)/(?P<stages>\d+)\] )?STEP (?P<step>\d+/\d+): "
                      r"(?P<instr>.*)$")
_PM_CACHE = re.compile(r"^--> Using cache [0-9a-f]+$")
_PM_PULLED = re.compile(r"^--> Cache pulled from remote (?P<ref>\S+)$")
_PM_COMMIT = re.compile(r"^--> [0-9a-f]{6,}$")
_PM_ERROR = re.compile(r"^Error: (?P<msg>.*)$")
_FROM_AS = re.compile(r"^FROM\s+\S+\s+AS\s+(?P<name>\S+)", re.IGNORECASE)


class BuildLogParser:
    """Incremental, pure parser of one build's output. ``feed`` a line, get its events."""

    def __init__(self, fmt: ProgressFormat):
        if fmt not in ("buildkit", "podman"):
            raise ValueError(f"unknown progress format {fmt!r}")
        self.format = fmt
        self.steps: dict[str, _Step] = {}
        self.failed_step: str | None = None
        self.error_message: str | None = None
        #: lines outside any step (BuildKit's final summary, podman warnings)
        self.loose: deque[str] = deque(maxlen=TAIL_LINES)
        self._podman_current: str | None = None
        self._podman_cached: set[str] = set()
        self._podman_stage_names: dict[str, str] = {}

    # -- feeding ------------------------------------------------------------------------
    def feed(self, line: str) -> list[BuildEvent]:
        line = line.rstrip("\r\n")
        if self.format == "buildkit":
            return self._feed_buildkit(line)
        return self._feed_podman(line)

    def feed_all(self, lines: Iterable[str]) -> list[BuildEvent]:
        events: list[BuildEvent] = []
        for line in lines:
            events.extend(self.feed(line))
        return events

    def _event(self, kind: EventKind, step: _Step, **extra) -> BuildEvent:
        return BuildEvent(kind, step.step_id, step.name, step.stage, step.step,
                          step.instruction, **extra)

    def _feed_buildkit(self, line: str) -> list[BuildEvent]:
        match = _BK_LINE.match(line)
        if not match:
            if line.strip() and line.strip() != "------":
                self.loose.append(line)
                self._note_summary_error(line)
            return []
        step_id, rest = match["id"], match["rest"]
        known = self.steps.get(step_id)
        if known is None:
            # The first line of a vertex is its name.
            step = self._buildkit_step(step_id, rest)
            self.steps[step_id] = step
            return [self._event("step", step)]
        if rest == "CACHED":
            return [self._event("cached", known)]
        done = _BK_DONE.match(rest)
        if done:
            return [self._event("done", known, elapsed=float(done["secs"]))]
        if rest.startswith(("ERROR:", "ERROR ")):
            message = rest.split(":", 1)[1].strip() if ":" in rest else rest[6:].strip()
            if known.name.startswith(_BK_CACHE_IMPORT):
                # a --cache-from entry not (yet) in the registry: BuildKit builds on
                known.add(message)
                return [self._event("output", known, text=message)]
            if self.failed_step is None:
                self.failed_step = step_id
                self.error_message = message
            return [self._event("error", known, text=message)]
        if _BK_PULLED.match(rest):
            return [self._event("pulled", known, text=rest)]
        output = _BK_OUTPUT.match(rest)
        if output:
            known.add(output["text"])
            return [self._event("output", known, text=output["text"])]
        if rest == known.name or _BK_NOISE.match(rest):
            return []  # repeated header when output resumes; digests; transfer progress
        known.add(rest)
        return [self._event("output", known, text=rest)]

    @staticmethod
    def _buildkit_step(step_id: str, name: str) -> _Step:
        match = _BK_NAME.match(name)
        if match:
            return _Step(step_id, name, match["stage"], match["step"], match["instr"])
        internal = _BK_INTERNAL.match(name)
        if internal:
            return _Step(step_id, name, "internal", None, internal["instr"])
        return _Step(step_id, name, None, None, None)

    def _note_summary_error(self, line: str) -> None:
        """BuildKit's closing line when no vertex failed (e.g. a Dockerfile parse error)."""
        text = line.strip()
        if self.error_message is None and (
                text.startswith(("failed to solve", "error:", "ERROR:", "ERROR "))):
            self.error_message = text.split(": ", 1)[1] if text.lower().startswith(
                "error") else text

    def _feed_podman(self, line: str) -> list[BuildEvent]:
        match = _PM_STEP.match(line)
        if match:
            stage_index = match["stage"] or "1"
            instruction = match["instr"]
            named = _FROM_AS.match(instruction)
            if named:
                self._podman_stage_names[stage_index] = named["name"]
            stage = self._podman_stage_names.get(stage_index, f"stage-{stage_index}"
                                                 if match["stage"] else None)
            step_id = f"{stage_index}.{match['step'].split('/')[0]}"
            step = _Step(step_id, line, stage, match["step"], instruction)
            self.steps[step_id] = step
            self._podman_current = step_id
            return [self._event("step", step)]
        current = self.steps.get(self._podman_current) if self._podman_current else None
        if (pulled := _PM_PULLED.match(line)) is not None:
            return [] if current is None else [self._event("pulled", current,
                                                           text=pulled["ref"])]
        if _PM_CACHE.match(line):
            if current is None:
                return []
            self._podman_cached.add(current.step_id)
            return [self._event("cached", current)]
        if _PM_COMMIT.match(line):
            # podman prints the layer id after "Using cache" too: that is not a build
            if current is None or current.step_id in self._podman_cached:
                return []
            self._podman_cached.add(current.step_id)  # the COMMIT repeat is not a 2nd step
            return [self._event("done", current)]
        error = _PM_ERROR.match(line)
        if error:
            self.loose.append(line)
            if self.error_message is None:
                self.error_message = error["msg"]
                if current is not None:
                    self.failed_step = current.step_id
                    return [self._event("error", current, text=error["msg"])]
            return []
        if current is not None and not line.startswith(("[", "COMMIT ", "Successfully tagged")):
            current.add(line)
            return [self._event("output", current, text=line)]
        if line.strip():
            self.loose.append(line)
        return []

    # -- results ------------------------------------------------------------------------
    def failure(self) -> BuildFailure:
        """The failing step and its tail; call after a build exited non-zero."""
        if self.failed_step is not None:
            step = self.steps[self.failed_step]
            label = step.name if step.instruction is None else (
                f"{step.stage} {step.step}: {step.instruction}" if step.stage and step.step
                else f"{step.step}: {step.instruction}" if step.step else step.name)
            return BuildFailure(label, step.excerpt(),
                                self.error_message or "the step failed")
        message = self.error_message or (self.loose[-1] if self.loose else
                                         "the build failed without an error message")
        return BuildFailure(None, tuple(self.loose), message)


def parse_build_output(lines: Iterable[str], fmt: ProgressFormat) -> list[BuildEvent]:
    """All events of a captured build log (pure; for tests and log re-reading)."""
    return BuildLogParser(fmt).feed_all(lines)


# --------------------------------------------------------------------------------------
# Display
# --------------------------------------------------------------------------------------

def _clock(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes_seconds = f"{rest // 60:02d}:{rest % 60:02d}"
    return f"{hours}:{minutes_seconds}" if hours else minutes_seconds


class ProgressDisplay:
    """Shows build events: a live rich line on a terminal, plain lines otherwise.

    Use as a context manager around the build and pass it as the ``progress`` callback.
    The CLI owns this object; library code only emits events.
    """

    def __init__(self, title: str, stream: IO[str] | None = None, live: bool | None = None,
                 clock=time.monotonic):
        self.title = title
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._clock = clock
        self.started = clock()
        self.cached = 0
        self.done = 0
        self.current: BuildEvent | None = None
        self.last_output = ""
        self._live: Live | None = None
        self._step_started: dict[str, float] = {}

    # rich renderable protocol: re-rendered on each refresh, so the clock keeps moving
    def __rich__(self):
        from rich.text import Text

        text = Text()
        text.append(f"{self.title} ", style="bold")
        text.append(f"{_clock(self._clock() - self.started)}  ", style="cyan")
        if self.current is not None:
            text.append(self.current.label[:100])
        text.append(f"  ({self.done} done, {self.cached} cached)", style="dim")
        if self.last_output:
            text.append(f"\n  {self.last_output[:120]}", style="dim")
        return text

    def __enter__(self) -> ProgressDisplay:  # noqa: PYI034 (typing.Self is 3.11+)
        self.started = self._clock()
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(self, console=Console(file=self.stream), refresh_per_second=4,
                              transient=True)
            self._live.start()
        else:
            self._print(f"{self.title}: started")
        return self

    def __exit__(self, *exc_info) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
        status = "failed" if exc_info[0] else "finished"
        self._print(f"{self.title}: {status} in {_clock(self._clock() - self.started)} "
                    f"({self.done} steps built, {self.cached} cached)")

    def _print(self, text: str) -> None:
        if self._live is not None:  # above the live line, kept in the scrollback
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def __call__(self, event: BuildEvent) -> None:
        if event.stage == "internal" or (event.step is None and event.kind != "error"):
            return  # context transfer, metadata loads, export: not build steps
        now = self._clock()
        if event.kind == "step":
            self.current = event
            self.last_output = ""
            self._step_started[event.step_id] = now
            if not self.live:
                self._print(f"[{_clock(now - self.started)}] {event.short_label}")
        elif event.kind == "output":
            self.last_output = event.text
        elif event.kind == "cached":
            self.cached += 1
        elif event.kind == "done":
            self.done += 1
            took = event.elapsed if event.elapsed is not None else (
                now - self._step_started.get(event.step_id, now))
            if took >= 10:  # slow steps stay visible, live or not
                self._print(f"[{_clock(now - self.started)}]   done in {_clock(took)}: "
                            f"{event.short_label}")
        elif event.kind == "error":
            self._print(f"[{_clock(now - self.started)}] FAILED {event.short_label}: "
                        f"{concise_error(event.text)}")
