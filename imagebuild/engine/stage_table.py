"""Where each Dockerfile step of a build came from: a registry cache, the local cache, or
built here; summed per stage.

A ``StageTable`` is a progress callback (imagebuild.engine.progress events) that passes every
event on and remembers, per step, what the engine said about it:

- ``imported``: a layer of the step was pulled from a registry (BuildKit prints the layer's
  download and unpacking under the step; podman ``--> Cache pulled from remote``);
- ``cached``: a cache hit with nothing to pull (BuildKit ``CACHED``, podman ``--> Using
  cache``): the local cache, or a registry entry whose layers no later step needed;
- ``built``: the step ran.

FROM steps are left out (their pulls are the base image), as are BuildKit's internal steps.
On a runner that never built the image there is no local cache, so every step that was not
built came from the registry cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from imagebuild.engine.progress import BuildEvent

#: The three answers, in the order the table shows them.
SOURCES = ("imported", "cached", "built")


@dataclass
class StageRow:
    stage: str
    #: step label -> "imported", "cached" or "built"
    steps: dict[str, str] = field(default_factory=dict)

    def count(self, source: str) -> int:
        return sum(1 for value in self.steps.values() if value == source)

    def labels(self, source: str) -> list[str]:
        return [label for label, value in self.steps.items() if value == source]


class StageTable:
    """Collects a build's events; ``rows()`` per stage in the order the build named them."""

    def __init__(self, forward: Callable[[BuildEvent], None] | None = None):
        self.forward = forward
        self._stages: dict[str, StageRow] = {}
        #: step id -> (stage, label) for the steps that count
        self._steps: dict[str, tuple[str, str]] = {}
        self._pulled: set[str] = set()
        self._cached: set[str] = set()

    def __call__(self, event: BuildEvent) -> None:
        if self.forward is not None:
            self.forward(event)
        if event.step is None or event.stage in (None, "internal") or \
                (event.instruction or "").upper().startswith("FROM "):
            return
        if event.step_id not in self._steps:
            self._steps[event.step_id] = (event.stage, event.short_label)
            self._stages.setdefault(event.stage, StageRow(event.stage))
        if event.kind == "pulled":
            self._pulled.add(event.step_id)
        elif event.kind == "cached":
            self._cached.add(event.step_id)

    def rows(self) -> list[StageRow]:
        for row in self._stages.values():
            row.steps.clear()
        for step_id, (stage, label) in self._steps.items():
            source = ("imported" if step_id in self._pulled else
                      "cached" if step_id in self._cached else "built")
            self._stages[stage].steps[label] = source
        return list(self._stages.values())

    def as_json(self) -> dict[str, dict[str, list[str]]]:
        """stage -> source -> the step labels (for ``build --json``)."""
        return {row.stage: {source: row.labels(source) for source in SOURCES}
                for row in self.rows()}

    def lines(self) -> list[str]:
        """The table as text: one row per stage, then the totals."""
        rows = self.rows()
        if not rows:
            return []
        width = max(len("STAGE"), *(len(row.stage) for row in rows))
        out = [f"{'STAGE':<{width}}  STEPS  " + "  ".join(s.upper() for s in SOURCES)]
        for row in rows:
            out.append(f"{row.stage:<{width}}  {len(row.steps):>5}  "
                       + "  ".join(f"{row.count(s):>{len(s)}}" for s in SOURCES))
        totals = {s: sum(row.count(s) for row in rows) for s in SOURCES}
        out.append(f"{'total':<{width}}  {sum(len(r.steps) for r in rows):>5}  "
                   + "  ".join(f"{totals[s]:>{len(s)}}" for s in SOURCES))
        return out
