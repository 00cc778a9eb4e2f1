"""Every requested artifact format of one image in one go: .sqsh, .sif, or both."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from imagebuild.convert import sif
from imagebuild.convert.artifacts import Artifact
from imagebuild.convert.sources import ImageSource
from imagebuild.convert.squashfs import (
    DEFAULT_COMPRESSION,
    Compression,
    SquashTool,
    squash_image,
)
from imagebuild.convert.tarfilter import StreamObserver
from imagebuild.errors import SquashError
from imagebuild.files import remove_quietly
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

FORMATS = ("sqsh", "sif")


def parse_formats(text: str, option: str = "--formats") -> tuple[str, ...]:
    """``sqsh,sif`` -> ("sqsh", "sif"); ``option`` is what the error names (``build`` takes
    the list as --squash)."""
    formats = tuple(dict.fromkeys(f.strip() for f in text.split(",") if f.strip()))
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise SquashError(f"{option}: expected a comma-separated list of {', '.join(FORMATS)},"
                          f" got {text!r}")
    return formats


def convert(
    source: ImageSource,
    output_dir: Path,
    name: str,
    formats: Sequence[str] = ("sqsh",),
    *,
    compression: Compression = DEFAULT_COMPRESSION,
    tool: SquashTool | None = None,
    sif_method: str = "auto",
    image_ref: str | None = None,
    epoch: int | None = None,
    runner: CommandRunner = DEFAULT_RUNNER,
    observer: StreamObserver | None = None,
) -> list[Artifact]:
    """Write ``<name>.sqsh`` and/or ``<name>.sif`` to ``output_dir``; return the artifacts.

    The .sif wraps the same squashfs (one export, one compression) unless Apptainer is
    installed and chosen (``sif_method`` auto|apptainer|siftool), which re-exports the image
    from the Docker engine (``image_ref``) its own way. ``observer`` sees the squash's
    stream (and may add files to it: the SBOM).
    """
    for fmt in formats:
        if fmt not in FORMATS:
            raise SquashError(f"--formats: unknown format {fmt!r}; expected {', '.join(FORMATS)}")
    method = sif.choose_method(sif_method, image_ref) if "sif" in formats else None
    artifacts: list[Artifact] = []
    sqsh_path = output_dir / f"{name}.sqsh"
    need_sqsh = "sqsh" in formats or method == "siftool"
    if need_sqsh:
        if "sqsh" in formats:
            result = squash_image(source, sqsh_path, compression=compression, tool=tool,
                                  epoch=epoch, runner=runner, observer=observer)
            artifacts.append(result.artifact)
            partition = result.artifact
        else:
            hidden = output_dir / f".{name}.sif-partition.sqsh"
            result = squash_image(source, hidden, compression=compression, tool=tool,
                                  epoch=epoch, runner=runner, observer=observer)
            partition = result.artifact
    sif_path = output_dir / f"{name}.sif"
    try:
        if method == "siftool":
            artifacts.append(sif.wrap_squashfs(partition.path, sif_path, source.config(),
                                               image_ref=image_ref or source.description,
                                               extra_seconds=partition.seconds,
                                               epoch=epoch, partition_sha256=partition.sha256,
                                               runner=runner))
        elif method == "apptainer":
            assert image_ref is not None
            artifacts.append(sif.apptainer_build(image_ref, sif_path, runner=runner))
    finally:
        if need_sqsh and "sqsh" not in formats:
            for leftover in (partition.path, partition.sidecar):
                remove_quietly(leftover)
    return artifacts
