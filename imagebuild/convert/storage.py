"""A container's filesystem read straight from the engine's storage, not through an export.

``docker export`` makes dockerd walk the container's filesystem, write it as tar and send it
over its HTTP socket for the client to read back; ``podman export`` walks and writes it in a
Go process. Measured on the 857 MiB benchmark image, 2 cores (benchmarks/squash_bench.py):
``docker export`` 2.8 s, ``podman export`` 2.5 s, GNU tar over the mounted filesystem 1.0 s.

- Docker (root, overlay2 driver): the export container's own layers (its empty upper layer,
  the init layer docker writes at create time, then the image's layers) are mounted
  read-only as one overlay in a private mount namespace (``unshare --mount``), so the mount
  never outlives the reader, whatever stops it.
- podman (any storage driver, rootful or rootless): ``podman mount`` of the export container,
  inside ``podman unshare`` when rootless (the user namespace that owns the storage), and
  ``podman umount`` when the walk ends or is stopped.

GNU tar then writes what the engines' pkg/archive writes for an export: the same members in
the same order (a depth-first walk with each directory's names in byte order), numeric
owners, whole-second mtimes, hard links to the first name walked, and only the extended
attributes the engine exports. The squashfs is byte-identical to the exported one
(tests/convert/test_storage.py, both engines, rootless podman included).

Anything else (Docker as non-root, another Docker storage driver, a daemon whose data root
is not visible here or that remaps user namespaces, a tar that is not GNU tar, a kernel or
sandbox refusing the mount) reads through the export.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from imagebuild.errors import EngineError, StorageUnavailable
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

#: The tools a read runs; util-linux, GNU findutils, coreutils and tar are in every
#: Debian/RHEL base system. --sort=name needs GNU tar 1.28 (2014).
_WALK_TOOLS = ("find", "sort", "tar")
_MOUNT_TOOLS = ("unshare", "mount")
_GNU_TAR = re.compile(r"\(GNU tar\) (\d+)\.(\d+)")
#: mount(2) takes one page of options; overlay2's short layer names keep 128 layers in it.
_MAX_OPTIONS = 4096

#: Extended attributes each engine's export carries: moby's pkg/archive reads only
#: security.capability; containers/storage's reads that and every user.* except overlay's
#: own (pkg/archive/archive.go, ReadSecurityXattrToTarHeader / ReadUserXattrToTarHeader).
DOCKER_XATTRS = ("security.capability",)
PODMAN_XATTRS = ("security.capability", "user.*")
_NOT_XATTRS = ("user.overlay.*",)


def walk_command(xattrs: Sequence[str]) -> list[str]:
    """GNU tar reading the top-level names from stdin (the walk skips the root itself) and
    recursing in name order. Its flags match the engines' export: pax format (xattrs need
    it) without the atime/ctime/sub-second mtime records they do not write, no user or
    group names."""
    return ["tar", "--create", "--file=-", "--record-size=1M", "--null", "--files-from=-",
            "--sort=name",
            "--numeric-owner", "--format=posix",
            "--pax-option=delete=atime,delete=ctime,delete=mtime", "--xattrs",
            *(f"--xattrs-include={pattern}" for pattern in xattrs),
            *(f"--xattrs-exclude={pattern}" for pattern in _NOT_XATTRS)]


#: The top-level names of the working directory, NUL-separated, in byte order.
_TOP_LEVEL = "find . -mindepth 1 -maxdepth 1 -printf '%P\\0' | LC_ALL=C sort -z"

# $1: overlay options, $2: mount point, $3: read|probe; then the tar command.
_DOCKER_SCRIPT = f"""
opts=$1 mountpoint=$2 mode=$3; shift 3
mount -t overlay -o "$opts" imagebuild-storage-read "$mountpoint"
[ "$mode" = probe ] && exit 0
cd "$mountpoint"
{_TOP_LEVEL} | "$@"
"""

# $1: podman, $2: container, $3: read|probe; then the tar command. The trap unmounts on
# every way out (the runner stops a reader with SIGINT, then SIGTERM).
_PODMAN_SCRIPT = f"""
podman=$1 container=$2 mode=$3; shift 3
mountpoint=$("$podman" mount "$container")
trap '"$podman" umount "$container" > /dev/null 2>&1 || :' EXIT
trap 'exit 130' INT TERM
[ "$mode" = probe ] && exit 0
cd "$mountpoint"
{_TOP_LEVEL} | "$@"
"""


@dataclass(frozen=True)
class StorageRead:
    """How one container's filesystem is read from storage: the command (with the read
    mode as its one variable word), where it runs, and what to call it in messages."""

    argv: tuple[str, ...]
    cwd: Path | None
    description: str

    def command(self, mode: str) -> list[str]:
        return [mode if word == "{mode}" else word for word in self.argv]


# --- Docker: overlay2 layers ------------------------------------------------------------------

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

    def read(self, mountpoint: Path) -> StorageRead:
        argv = ("unshare", "--mount", "--propagation", "private", "sh", "-ec", _DOCKER_SCRIPT,
                "sh", self.mount_options, str(mountpoint), "{mode}",
                *walk_command(DOCKER_XATTRS))
        # The links are relative to the data root, as overlay2 itself mounts them.
        return StorageRead(argv, self.root, self.describe())


def check_tools(tools: Sequence[str]) -> None:
    """StorageUnavailable unless ``tools`` are on PATH and tar is GNU tar >= 1.28."""
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise StorageUnavailable(f"{', '.join(missing)} not found on PATH")
    if not _gnu_tar_sorts():
        raise StorageUnavailable("tar on PATH is not GNU tar 1.28 or newer (--sort=name)")


@functools.cache
def _gnu_tar_sorts() -> bool:
    try:
        said = subprocess.run(["tar", "--version"], capture_output=True, text=True,
                              check=False, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return False
    match = _GNU_TAR.search(said)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (1, 28)


def userns_remapped(security_options: Sequence[str]) -> bool:
    """Whether dockerd runs with ``userns-remap`` (``docker info``'s SecurityOptions hold
    ``name=userns``): its layers then store files under the remapped IDs, which only its
    own export maps back."""
    return any("name=userns" in option for option in security_options)


def overlay_layers(graph_driver: Mapping[str, Any], *, euid: int | None = None,
                   security_options: Sequence[str] = ()) -> OverlayLayers:
    """The layers of a container from its ``GraphDriver`` (``docker container inspect``),
    or StorageUnavailable saying why they cannot be read here."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise StorageUnavailable(f"mounting a container's layers needs root (uid {euid})")
    name = graph_driver.get("Name") or "unknown"
    data = graph_driver.get("Data") or {}
    if name != "overlay2" or not data.get("UpperDir"):
        raise StorageUnavailable(f"the engine's storage driver is {name}, not overlay2")
    if userns_remapped(security_options):
        raise StorageUnavailable("the engine remaps user namespaces (userns-remap): its "
                                 "layers hold other owners than the image's")
    check_tools(_MOUNT_TOOLS + _WALK_TOOLS)
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


# --- podman: podman mount ---------------------------------------------------------------------

def podman_read(podman: str, container: str, *, rootless: bool) -> StorageRead:
    """``podman mount`` of a container and the walk, in podman's user namespace when
    rootless (its storage is owned by the user's subordinate IDs there)."""
    check_tools(_WALK_TOOLS)
    prefix = (podman, "unshare") if rootless else ()
    argv = (*prefix, "sh", "-ec", _PODMAN_SCRIPT, "sh", podman, container, "{mode}",
            *walk_command(PODMAN_XATTRS))
    return StorageRead(argv, None, "podman storage (podman mount" +
                       (" in podman unshare)" if rootless else ")"))


# --- reading ----------------------------------------------------------------------------------

def probe(read: StorageRead, runner: CommandRunner = DEFAULT_RUNNER) -> None:
    """Mount once and leave: StorageUnavailable if the kernel or a sandbox refuses it
    (a root without CAP_SYS_ADMIN, a seccomp profile without unshare, podman unable to
    mount)."""
    result = runner.capture(read.command("probe"), cwd=read.cwd, step="storage mount",
                            check=False)
    if result.returncode != 0:
        raise StorageUnavailable(f"the mount failed: {result.tail(1) or 'no output'}")


@contextmanager
def mountpoint() -> Iterator[Path]:
    """An empty directory to mount on (removed afterwards; the mount itself lives only in
    the reader's namespace)."""
    with tempfile.TemporaryDirectory(prefix="imagebuild-read-") as path:
        yield Path(path)


@contextmanager
def storage_tar(read: StorageRead, what: str,
                runner: CommandRunner = DEFAULT_RUNNER) -> Iterator[BinaryIO]:
    """The container's filesystem as a tar stream on an unbuffered pipe (the tar filter
    moves file bodies on with splice(2)). EngineError if the walk fails."""
    with tempfile.TemporaryFile() as stderr:  # a file: tar's warnings never block it
        with runner.spawn(read.command("read"), cwd=read.cwd, stdout=subprocess.PIPE,
                          stderr=stderr, env={**os.environ, "LC_ALL": "C"}) as proc:
            assert proc.stdout is not None
            # Nothing has been read through the buffered wrapper: its raw pipe (a FileIO)
            # is exact.
            stream = proc.stdout.raw  # type: ignore[attr-defined]
            yield stream
            while stream.read(1 << 16):
                pass  # tar pads its last record past the end-of-archive blocks: let it finish
            proc.stdout.close()
            returncode = proc.wait()
        stderr.seek(0)
        said = stderr.read().decode(errors="replace").strip()[-2000:]
        if returncode != 0:
            raise EngineError(f"reading {what} from {read.description} failed "
                              f"(exit status {returncode}): {said or 'no output'}",
                              hint="--read export reads it through the engine instead")
