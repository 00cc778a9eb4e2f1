"""A Docker container's filesystem read straight from the engine's overlay2 storage.

``docker export`` makes dockerd walk the container's filesystem, write it as tar and send it
over its HTTP socket, and the client read it back: on 2 cores that is most of a squash
(benchmarks/squash_bench.py: 3.7 s and ~2.5 CPU-seconds for an 870 MiB image, against
0.9 s and 1.2 CPU-seconds here). Where imagebuild runs as root beside a dockerd using the
overlay2 driver, the export container's own layers (its empty upper layer, the init layer
docker writes at create time, then the image's layers) are mounted read-only as one overlay
in a private mount namespace, so the mount never outlives the reader, whatever stops it,
and GNU tar writes what docker's export writes: the same members in the same order (a
depth-first walk with each directory's names in byte order), numeric owners, whole-second
mtimes, the security.capability extended attribute only, hard links to the first name
walked. The squashfs is byte-identical to the exported one (tests/convert/test_docker.py).

Anything else (not root, another storage driver, a daemon whose data root is not visible
here, a kernel refusing the mount) reads through ``docker export``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from imagebuild.engine.runner import DEFAULT_RUNNER, CommandRunner
from imagebuild.errors import EngineError

#: The tools the read runs; util-linux, GNU findutils, coreutils and tar are in every
#: Debian/RHEL base system.
_TOOLS = ("unshare", "mount", "find", "sort", "tar")
#: mount(2) takes one page of options; overlay2's short layer names keep 128 layers in it.
_MAX_OPTIONS = 4096

# Mount, then list the top level (docker's walk skips the root itself) and let tar walk
# the rest. tar's flags match moby's pkg/archive as `docker export` uses it: pax format
# (xattrs need it) without the atime/ctime/sub-second mtime records docker does not write,
# no user/group names, only security.capability among the extended attributes.
_READ_SCRIPT = r"""
mount -t overlay -o "$1" imagebuild-storage-read "$2"
[ "$3" = probe ] && exit 0
cd "$2"
find . -mindepth 1 -maxdepth 1 -printf '%P\0' | LC_ALL=C sort -z |
  tar --create --file=- --null --files-from=- --sort=name --numeric-owner \
      --format=posix --pax-option=delete=atime,delete=ctime,delete=mtime \
      --xattrs --xattrs-include=security.capability
"""


class StorageUnavailable(Exception):
    """Why this container cannot be read from storage (the export path is taken instead)."""


@dataclass(frozen=True)
class OverlayLayers:
    """A container's layers in overlay2: the data root and each layer's short link
    (``l/<id>``, as overlay2 mounts them), topmost first."""

    root: Path
    links: tuple[str, ...]

    @property
    def mount_options(self) -> str:
        return "ro,lowerdir=" + ":".join(self.links)

    def describe(self) -> str:
        return f"overlay2 storage, {len(self.links)} layers"


def overlay_layers(graph_driver: Mapping[str, Any], *, euid: int | None = None
                   ) -> OverlayLayers:
    """The layers of a container from its ``GraphDriver`` (``docker container inspect``),
    or StorageUnavailable saying why they cannot be read here."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise StorageUnavailable(f"mounting a container's layers needs root (uid {euid})")
    name = graph_driver.get("Name") or "unknown"
    data = graph_driver.get("Data") or {}
    if name != "overlay2" or not data.get("UpperDir"):
        raise StorageUnavailable(f"the engine's storage driver is {name}, not overlay2")
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        raise StorageUnavailable(f"{', '.join(missing)} not found on PATH")
    dirs = [data["UpperDir"], *filter(None, (data.get("LowerDir") or "").split(":"))]
    links = []
    roots = set()
    for directory in map(Path, dirs):
        layer = directory.parent
        try:
            links.append("l/" + (layer / "link").read_text().strip())
        except OSError as exc:
            raise StorageUnavailable(f"{layer} is not readable here ({exc.strerror}): the "
                                     "engine's data root is elsewhere") from exc
        roots.add(layer.parent)
    if len(roots) != 1 or len(links) < 2:
        raise StorageUnavailable("the container's layers are not in one overlay2 data root")
    layers = OverlayLayers(roots.pop(), tuple(links))
    if len(layers.mount_options) >= _MAX_OPTIONS:
        raise StorageUnavailable(f"{len(links)} layers do not fit in one overlay mount")
    return layers


def _argv(layers: OverlayLayers, mountpoint: Path, mode: str) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", _READ_SCRIPT,
            "sh", layers.mount_options, str(mountpoint), mode]


def probe(layers: OverlayLayers, runner: CommandRunner = DEFAULT_RUNNER) -> None:
    """Mount once and leave: StorageUnavailable if the kernel or a sandbox refuses it
    (a root without CAP_SYS_ADMIN, a seccomp profile without unshare)."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-read-") as mountpoint:
        result = runner.capture(_argv(layers, Path(mountpoint), "probe"), cwd=layers.root,
                                step="overlay mount", check=False)
    if result.returncode != 0:
        raise StorageUnavailable(f"the overlay mount failed: {result.tail(1) or 'no output'}")


@contextmanager
def storage_tar(layers: OverlayLayers, description: str,
                runner: CommandRunner = DEFAULT_RUNNER) -> Iterator[IO[bytes]]:
    """The container's filesystem as a tar stream on an unbuffered pipe (the tar filter
    moves file bodies on with splice(2)). EngineError if tar fails."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-read-") as mountpoint, \
            tempfile.TemporaryFile() as stderr:  # a file: tar's warnings never block it
        with runner.spawn(_argv(layers, Path(mountpoint), "read"), cwd=layers.root,
                          stdout=subprocess.PIPE, stderr=stderr,
                          env={**os.environ, "LC_ALL": "C"}) as proc:
            assert proc.stdout is not None
            # Nothing has been read through the buffered wrapper: its raw pipe is exact.
            stream = proc.stdout.raw  # type: ignore[attr-defined]
            yield stream
            while stream.read(1 << 16):
                pass  # tar pads its last record past the end-of-archive blocks: let it finish
            proc.stdout.close()
            returncode = proc.wait()
        stderr.seek(0)
        said = stderr.read().decode(errors="replace").strip()[-2000:]
        if returncode != 0:
            raise EngineError(f"reading {description} from {layers.describe()} failed "
                              f"(exit status {returncode}): {said or 'no output'}",
                              hint="--read export reads it through the engine instead")
