"""One pass over an image's files: their sizes, dpkg's database and the OS release, seen in
the rootfs stream the squash reads (``imagebuild.convert.tarfilter.StreamObserver``), or in
an export of its own when nothing is squashed.

The figures are those of the files a runtime sees (the squashfs input), not the engine's
layer sizes: layers count a file once per layer that writes it, and a later layer's
deletion (hipBLASLt's libraries replacing torch's bundled ones) hides bytes the layers
still hold.
"""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

from imagebuild.convert.sources import ImageSource
from imagebuild.convert.tarfilter import RootfsEntry, filter_rootfs_tar
from imagebuild.render.layout import DEVICE_CODE_REPORT, IMAGE_MANIFEST

DPKG_STATUS = "var/lib/dpkg/status"
DPKG_INFO = "var/lib/dpkg/info/"
#: What the final stage's device-code diet removed (imagebuild.render.layout).
DEVICE_CODE = DEVICE_CODE_REPORT.lstrip("/")
#: The image's manifest: what the build recorded of its components (the SBOM reads the
#: submodules a component was built with).
MANIFEST = IMAGE_MANIFEST.lstrip("/")
#: /etc/os-release is a link to /usr/lib/os-release on Debian and Ubuntu (os-release(5)).
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")


@dataclass
class ImageScan:
    """The observer: every regular file's size, and the content of the few small files the
    size table and the SBOM read. ``finish`` (set by the caller) makes the files to inject
    from what was seen (the SBOM), once the image's own members are through."""

    files: dict[str, int] = field(default_factory=dict)
    captured: dict[str, bytes] = field(default_factory=dict)
    injects: frozenset[str] = frozenset()
    finish: Callable[[ImageScan], Iterable[RootfsEntry]] | None = None
    done: bool = False

    def wants(self, name: str) -> bool:
        return name in (DPKG_STATUS, DEVICE_CODE, MANIFEST, *OS_RELEASE) or (
            name.startswith(DPKG_INFO) and name.endswith(".list"))

    def member(self, name: str, info: tarfile.TarInfo, data: bytes | None) -> None:
        if info.isreg():
            self.files[name] = info.size
        if data is not None:
            self.captured[name] = data

    def entries(self) -> Iterable[RootfsEntry]:
        self.done = True
        return list(self.finish(self)) if self.finish else []

    @property
    def total(self) -> int:
        return sum(self.files.values())

    def device_code_removed(self) -> tuple[int, int] | None:
        """(bytes, files) of other architectures' device code the final stage deleted."""
        if DEVICE_CODE not in self.captured:
            return None
        try:
            report = json.loads(self.captured[DEVICE_CODE])
            return int(report["removed_bytes"]), int(report["removed_files"])
        except (ValueError, KeyError, TypeError):
            return None

    def manifest(self) -> dict:
        """/opt/imagebuild/manifest.json; empty when the image has none or it is unreadable."""
        try:
            found = json.loads(self.captured.get(MANIFEST, b"{}"))
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}

    @property
    def dpkg_status(self) -> str:
        return self.captured.get(DPKG_STATUS, b"").decode("utf-8", "replace")

    def os_release(self) -> dict[str, str]:
        """/etc/os-release as a dict (its shell-like KEY=value lines, quotes removed)."""
        text = next((self.captured[p] for p in OS_RELEASE if p in self.captured), b"")
        result = {}
        for line in text.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.startswith("#"):
                result[key.strip()] = value.strip().strip("'\"")
        return result

    def package_files(self) -> dict[str, list[str]]:
        """dpkg package name (``libgomp1`` or ``libgomp1:amd64``) -> the paths it installed
        (``var/lib/dpkg/info/<package>.list``, without the leading slash)."""
        result = {}
        for name, data in self.captured.items():
            if name.startswith(DPKG_INFO) and name.endswith(".list"):
                package = name[len(DPKG_INFO):-len(".list")]
                result[package] = [line.lstrip("/") for line in
                                   data.decode("utf-8", "replace").splitlines() if line.strip()]
        return result


class _Discard:
    def write(self, data: bytes) -> int:
        return len(data)

    def flush(self) -> None:
        pass


def scan_image(source: ImageSource, scan: ImageScan) -> ImageScan:
    """Export ``source`` once and let ``scan`` see it (through the squash's own filter, so
    both see the same members); the output is discarded."""
    with source.rootfs_tar() as stream:
        filter_rootfs_tar(stream, _Discard(), observer=scan)  # type: ignore[arg-type]
    return scan


def scan_tar(stream: BinaryIO, scan: ImageScan) -> ImageScan:
    """The same over a tar file (tests)."""
    filter_rootfs_tar(stream, _Discard(), observer=scan)  # type: ignore[arg-type]
    return scan
