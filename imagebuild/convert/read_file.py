"""One file out of a squashed image (.sqsh, or the squashfs partition of a .sif), read
with squashfs-tools' ``unsquashfs -cat`` (its ``-o`` skips the bytes before a SIF's
partition), without a container engine or a runtime: how ``imagebuild doctor x.sif``
reads the image's manifest on a node that has neither Docker nor a GPU allocation."""

from __future__ import annotations

import struct
from pathlib import Path

from imagebuild.convert import sif_layout as layout
from imagebuild.errors import EngineError, SquashError
from imagebuild.process import DEFAULT_RUNNER, CommandRunner


def is_sif(path: Path) -> bool:
    with open(path, "rb") as stream:
        return layout.has_magic(stream.read(layout.LAUNCH_FIELD + len(layout.MAGIC)))


def sif_partition(path: Path) -> tuple[int, int]:
    """(offset, size) of the SIF's primary system partition, a squashfs."""
    with open(path, "rb") as stream:
        total, offset = layout.descriptor_table(stream, str(path))
        stream.seek(offset)
        table = stream.read(total * layout.DESCRIPTOR_SIZE)
    for index in range(total):
        start = index * layout.DESCRIPTOR_SIZE
        kind, used = struct.unpack_from("<i?", table, start)
        if not used or kind != layout.DATA_PARTITION:
            continue
        data_offset, size = struct.unpack_from("<qq", table, start + layout.DESCRIPTOR_EXTENT)
        fstype, parttype = struct.unpack_from("<ii", table, start + layout.DESCRIPTOR_EXTRA)
        if fstype == layout.FS_SQUASH and parttype == layout.PART_PRIMARY_SYSTEM:
            return data_offset, size
    raise SquashError(f"{path}: the SIF has no squashfs system partition",
                      hint="an image built by apptainer or imagebuild squash has one; an "
                           "encrypted or ext3 SIF cannot be read here")


def read_from_image_file(path: Path, inner: str, runner: CommandRunner = DEFAULT_RUNNER
                         ) -> str | None:
    """The text of ``inner`` (an absolute path in the image) in the .sqsh or .sif at
    ``path``; None when the image has no such file."""
    if not path.is_file():
        raise SquashError(f"{path}: no such file", hint="build and squash it first "
                          "(imagebuild build RECIPE --squash sqsh,sif), or give a path this "
                          "node can read")
    offset = sif_partition(path)[0] if is_sif(path) else 0
    argv = ["unsquashfs", *(["-o", str(offset)] if offset else []), "-cat", str(path),
            inner.lstrip("/")]
    try:
        result = runner.capture(argv, step="unsquashfs -cat", check=False)
    except (EngineError, OSError) as exc:
        raise SquashError(f"{path}: cannot run unsquashfs ({exc})",
                          hint="install squashfs-tools (Debian: apt install squashfs-tools)"
                          ) from exc
    if result.returncode == 0:
        return result.stdout
    said = (result.stderr or result.stdout).strip()
    if "no matches for" in said:  # unsquashfs 4.5's words for a path the image lacks
        return None
    raise SquashError(f"{path}: unsquashfs cannot read it (exit status {result.returncode}: "
                      f"{said[-300:]})", hint="is it a squashfs image (.sqsh) or a SIF?")
