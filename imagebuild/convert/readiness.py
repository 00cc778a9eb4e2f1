"""Before a build that squashes: are the tools installed, can the output directory be written,
and has it room? Checked in well under a second, so a missing tool or a full disk refuses the
build before the hours of compiling it would otherwise come after.

The room a squash needs is estimated, in this order, from the last artifacts of the same name
in the output directory (``<name>.artifacts.json``: what the previous squash wrote, plus 10%),
from the last build record's image size (``<name>.build.json``: the image's uncompressed
bytes, more than its squashfs needs), else a stated minimum of 1 GiB per file written. Files
written: one per format, and with a .sif made by siftool but no .sqsh asked for, the squashfs
it wraps, kept until the .sif is done (imagebuild.convert.formats).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from imagebuild.convert import sif
from imagebuild.convert.artifacts import record_path as artifacts_record
from imagebuild.convert.inventory import record_path as build_record
from imagebuild.convert.squashfs import SquashTool, find_squash_tool
from imagebuild.errors import SquashError
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

#: The room asked for per file written when no earlier build of the name is recorded: the
#: CPU demo image squashes to about 0.3 GiB; a ROCm image to several GiB, which its first
#: build cannot know in advance.
MINIMUM_PER_FILE = 1 << 30
#: Headroom over the last artifacts' size: a rebuild with newer pins may grow a little.
HEADROOM = 1.1

_NOTHING_BUILT = "nothing was built"


@dataclass(frozen=True)
class SquashReadiness:
    """What the squash after the build will use, and the room it was checked against."""

    tool: SquashTool
    sif_method: str | None
    needed: int
    free: int
    #: where ``needed`` came from, for the error and the log
    basis: str


def free_bytes(directory: Path) -> int:
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def _gib(size: float) -> str:
    return f"{size / (1 << 30):.1f} GiB"


def existing_ancestor(path: Path) -> Path:
    """``path`` or its nearest existing parent (where the directory would be created)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor or "/")


def check_writable(output_dir: Path, option: str = "--output-dir") -> Path:
    """The existing directory ``output_dir`` is, or would be created in; an error when it
    cannot be: a file in the way, or no write permission (tried for real: a temporary file,
    removed at once, so ACLs, read-only mounts and root squash all count)."""
    where = existing_ancestor(output_dir)
    if not where.is_dir():
        raise SquashError(f"{option} {output_dir}: {where} is a file, not a directory",
                          hint=f"choose another {option}; {_NOTHING_BUILT}")
    try:
        handle, probe = tempfile.mkstemp(prefix=".imagebuild-write-test-", dir=where)
    except OSError as exc:
        detail = "" if where == output_dir else f" (its parent {where} is where it is made)"
        raise SquashError(f"{option} {output_dir}: cannot write there{detail}: "
                          f"{exc.strerror or exc}",
                          hint=f"choose a directory you can write with {option}; "
                               f"{_NOTHING_BUILT}") from exc
    os.close(handle)
    os.unlink(probe)
    return where


def files_written(formats: Sequence[str], sif_method: str | None) -> int:
    hidden_partition = "sif" in formats and "sqsh" not in formats and sif_method == "siftool"
    return len(formats) + int(hidden_partition)


def estimate_room(output_dir: Path, name: str, formats: Sequence[str],
                  sif_method: str | None) -> tuple[int, str]:
    """Bytes the squash of ``name`` into ``output_dir`` needs, and what says so."""
    files = files_written(formats, sif_method)
    try:
        record = json.loads(artifacts_record(output_dir, name).read_text())
        sizes = {a["kind"]: int(a["size"]) for a in record["artifacts"]}
        if all(fmt in sizes for fmt in formats):
            last = sum(sizes[fmt] for fmt in formats)
            last += sizes["sif"] if files > len(formats) else 0
            return int(last * HEADROOM), f"the last artifacts of {name} ({_gib(last)}) + 10%"
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        total = int(json.loads(build_record(output_dir, name).read_text())
                    ["sizes"]["total_bytes"])
        return total * files, (f"the last build's image size ({_gib(total)}) x {files} "
                               f"file{'s' if files > 1 else ''}, uncompressed: an upper "
                               f"bound")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return MINIMUM_PER_FILE * files, (f"no earlier build of {name} recorded there: at least "
                                      f"{_gib(MINIMUM_PER_FILE)} per file, {files} "
                                      f"file{'s' if files > 1 else ''}")


def check_ready_to_squash(formats: Sequence[str], output_dir: Path, name: str, *,
                          sif_method: str = "auto", option: str = "--squash",
                          which: Callable[[str], str | None] = shutil.which,
                          runner: CommandRunner = DEFAULT_RUNNER,
                          free: Callable[[Path], int] | None = None) -> SquashReadiness:
    """Refuse, with a located error and a hint, a squash that could not finish: its squashfs
    and SIF tools missing, ``output_dir`` not writable, or too little room in it."""
    formats_text = ",".join(formats)
    try:
        tool = find_squash_tool(None, which=which, runner=runner)
        # Apptainer builds from a Docker engine's image; which engine holds it is not
        # known yet, so either tool will do here (the squash asks again with the engine).
        method = sif.choose_method(sif_method, "the built image", which=which) \
            if "sif" in formats else None
    except SquashError as exc:
        raise SquashError(f"{option} {formats_text}: "
                          f"{exc.message.removeprefix('squash: ').removeprefix('sif: ')}",
                          hint=f"{exc.hint}; {_NOTHING_BUILT}" if exc.hint else None) from exc
    where = check_writable(output_dir)
    needed, basis = estimate_room(output_dir, name, formats, method)
    available = (free or free_bytes)(where)
    if available < needed:
        raise SquashError(f"--output-dir {output_dir}: {_gib(available)} free in {where}, "
                          f"{option} {formats_text} needs about {_gib(needed)} ({basis})",
                          hint=f"free space there or choose another --output-dir; "
                               f"{_NOTHING_BUILT}")
    return SquashReadiness(tool, method, needed, available, basis)
