"""Which stages of a build would rebuild, and why, without building (``build --plan``).

Each stage of the rendered Dockerfile gets a digest of what decides its layers: its own
instructions (with the global ARGs and the build args it declares), the bytes of every
context file it COPYs or bind-mounts, and the digests of the stages it builds on (FROM,
COPY --from, RUN --mount=from). A build records the digests in a label of its image; the
plan compares today's with the latest build's. BuildKit keys its cache per instruction, so
a stage whose digest is unchanged is a cache hit while its cache lives; a changed one
rebuilds from the first instruction whose inputs changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.render.context import BuildContext

#: Image label holding the stage digests of the build that made the image.
STAGE_DIGESTS_LABEL = "org.imagebuild.stage-digests"

_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)(?:\s+AS\s+(?P<name>\S+))?",
                   re.IGNORECASE)
_COPY_FROM = re.compile(r"--from=(?P<stage>[^\s,]+)")
_MOUNT = re.compile(r"--mount=(?P<spec>\S+)")


@dataclass(frozen=True)
class Stage:
    name: str
    base: str  # the FROM image or stage
    text: str  # its instructions, continuation lines joined
    parents: tuple[str, ...]  # stages it builds on
    context_paths: tuple[str, ...]  # context sources it COPYs or bind-mounts


@dataclass(frozen=True)
class StageChange:
    stage: str
    rebuilds: bool
    why: str


def _instructions(dockerfile: str) -> list[str]:
    """Logical lines: continuations joined, comments and blank lines dropped."""
    lines: list[str] = []
    pending = ""
    for raw in dockerfile.splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def parse_stages(dockerfile: str) -> tuple[list[str], list[Stage]]:
    """The global ARG lines (before the first FROM) and the stages, in file order."""
    global_args: list[str] = []
    stages: list[Stage] = []
    current: dict | None = None

    def close() -> None:
        if current is not None:
            stages.append(Stage(current["name"], current["base"], "\n".join(current["lines"]),
                                tuple(dict.fromkeys(current["parents"])),
                                tuple(dict.fromkeys(current["paths"]))))

    for line in _instructions(dockerfile):
        if (found := _FROM.match(line)) is not None:
            close()
            name = found["name"] or str(len(stages))
            known = {s.name for s in stages}
            base = found["image"]
            current = {"name": name, "base": base, "lines": [line],
                       "parents": [base] if base in known else [], "paths": []}
            continue
        if current is None:
            global_args.append(line)
            continue
        current["lines"].append(line)
        word = line.split(None, 1)[0].upper()
        if word in ("COPY", "ADD"):
            if (source := _COPY_FROM.search(line)) is not None:
                current["parents"].append(source["stage"])
            else:
                operands = [w for w in line.split()[1:] if not w.startswith("--")]
                current["paths"] += operands[:-1]
        for mount in _MOUNT.finditer(line):
            options = dict(part.split("=", 1) for part in mount["spec"].split(",")
                           if "=" in part)
            if options.get("from"):
                current["parents"].append(options["from"])
            elif options.get("type", "bind") == "bind" and options.get("source"):
                current["paths"].append(options["source"])
    close()
    return global_args, stages


def _context_files(context: BuildContext, source: str) -> list[str]:
    source = source.strip("/").removeprefix("./")
    if source in ("", "."):
        return list(context.files)
    return [f for f in context.files if f == source or f.startswith(source + "/")]


def stage_digests(context: BuildContext, build_args: Mapping[str, str]
                  ) -> dict[str, dict[str, str]]:
    """Each stage's digests (sha256 hex, 12 digits), in file order: ``instructions`` (its
    text, the global ARGs and the build args it declares), ``files`` (the context files it
    uses) and ``stage`` (both, and the stages it builds on)."""
    global_args, stages = parse_stages(context.dockerfile.read_text(encoding="utf-8"))
    digests: dict[str, dict[str, str]] = {}
    for stage in stages:
        own = hashlib.sha256("\n".join(global_args).encode() + b"\0" + stage.text.encode())
        for name, value in sorted(build_args.items()):
            if re.search(rf"\bARG\s+{re.escape(name)}\b", stage.text):
                own.update(f"\0{name}={value}".encode())
        files = hashlib.sha256()
        for path in sorted({f for p in stage.context_paths for f in _context_files(context, p)}):
            files.update(path.encode() + b"\0")
            files.update((context.directory / path).read_bytes())
        whole = hashlib.sha256(f"{own.hexdigest()}\0{files.hexdigest()}".encode())
        for parent in stage.parents:
            whole.update(f"\0{parent}:{digests.get(parent, {}).get('stage', '')}".encode())
        digests[stage.name] = {"instructions": own.hexdigest()[:12],
                               "files": files.hexdigest()[:12],
                               "stage": whole.hexdigest()[:12]}
    return digests


def stage_cache_keys(context: BuildContext, target: str | None = None) -> dict[str, str]:
    """Each stage's key in a registry cache (imagebuild.engine.cache), for the stages a
    build of ``target`` (None: the last stage) makes and that have steps, in file order: its
    ``stage`` digest
    without the build args. The lock's SOURCE_DATE_EPOCH, a build arg, changes at every
    re-lock, while what a stage does before its ``ARG SOURCE_DATE_EPOCH`` (hipBLASLt's
    compile) does not; the engine's own per-instruction keys tell the two apart."""
    _, stages = parse_stages(context.dockerfile.read_text(encoding="utf-8"))
    if not stages:
        return {}
    digests = stage_digests(context, {})
    parents = {stage.name: stage.parents for stage in stages}
    wanted: set[str] = set()
    pending = [target or stages[-1].name]
    while pending:
        name = pending.pop()
        if name in parents and name not in wanted:
            wanted.add(name)
            pending.extend(parents[name])
    # A stage that is only its FROM line has no step to keep.
    return {stage.name: digests[stage.name]["stage"] for stage in stages
            if stage.name in wanted and "\n" in stage.text}


def label_value(digests: Mapping[str, Mapping[str, str]]) -> str:
    return json.dumps({k: dict(v) for k, v in digests.items()}, separators=(",", ":"),
                      sort_keys=True)


def read_label(labels: Mapping[str, str]) -> dict[str, dict[str, str]] | None:
    try:
        value = json.loads(labels.get(STAGE_DIGESTS_LABEL, ""))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def compare(dockerfile: Path, current: Mapping[str, Mapping[str, str]],
            previous: Mapping[str, Mapping[str, str]] | None,
            unknown: str = "no earlier build of this recipe to compare with"
            ) -> list[StageChange]:
    """Per stage: does it rebuild against ``previous`` (None: nothing known, for the reason
    ``unknown``), and why: its instructions, its context files, or a stage it builds on."""
    _, stages = parse_stages(dockerfile.read_text(encoding="utf-8"))
    changes: list[StageChange] = []
    rebuilt: set[str] = set()
    for stage in stages:
        now, before = current.get(stage.name, {}), (previous or {}).get(stage.name)
        if previous is None:
            why = unknown
        elif before is None:
            why = "a new stage"
        elif before.get("stage") == now.get("stage"):
            changes.append(StageChange(stage.name, False, "unchanged"))
            continue
        elif before.get("instructions") != now.get("instructions"):
            why = "its instructions or build args changed"
        elif before.get("files") != now.get("files"):
            why = f"its files changed ({', '.join(stage.context_paths)})"
        else:
            upstream = [p for p in stage.parents if p in rebuilt] or list(stage.parents)
            why = f"builds on {', '.join(upstream)}, which rebuilds"
        changes.append(StageChange(stage.name, True, why))
        rebuilt.add(stage.name)
    return changes
