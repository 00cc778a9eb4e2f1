"""The size of each part of a built image, from its files (``imagebuild.convert.scan``), and
what a lean final stage must not carry.

Parts, first match wins: the trees imagebuild installs (by path prefix: each image
component's parts, named by the component, then the venv; given as data by the build), then
the files of the OS packages the final stage installs by name (dpkg's
``info/<package>.list``), then imagebuild's own small files; everything else came with the
base image. A package the final stage pulls in only as a dependency counts under the base
image: telling it apart would need the base image's package list, which the final image
does not record.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from imagebuild.render.layout import IMAGE_ROOT, SHIM_PATH, VENV

BASE = "base image"
OS_PACKAGES = "OS packages added"
VENV_PART = "venv"
OTHER = "other"

#: imagebuild's own files outside the trees above (uv, the shim, the manifest and checks,
#: the login-shell PATH file, the loader configuration for libfabric).
OWN_FILES = (IMAGE_ROOT.lstrip("/") + "/", SHIM_PATH.lstrip("/"), "usr/local/bin/uv",
             "etc/profile.d/zz-imagebuild-path.sh", "etc/ld.so.conf.d/imagebuild-")


@dataclass(frozen=True)
class PartLayout:
    """Path prefixes (no leading slash, trailing slash) of the parts an image's build
    installs, and the table's parts in order."""

    prefixes: tuple[tuple[str, str], ...]  # (prefix, part), most specific first
    packages: frozenset[str]  # OS packages the final stage installs by name
    #: The size table's rows: base image, OS packages, venv, the components' parts, other.
    parts: tuple[str, ...] = (BASE, OS_PACKAGES, VENV_PART, OTHER)
    #: Prefixes whose build-only files are kept on purpose (not leftovers).
    keep: tuple[str, ...] = ()

    @classmethod
    def of(cls, components: Iterable[tuple[str, str]], packages: Iterable[str],
           keep: Iterable[str] = ()) -> PartLayout:
        """The layout of an image: ``components``' (prefix, part) pairs, most specific first,
        and the OS packages its final stage installs."""
        prefixes = [*components, (VENV, VENV_PART)]
        named = dict.fromkeys(part for _, part in prefixes if part != VENV_PART)
        # A recipe may pin a package's version (librccl1=7.2.4-1~exp3); dpkg names it alone.
        return cls(tuple((p.strip("/") + "/", part) for p, part in prefixes),
                   frozenset(p.split("=", 1)[0] for p in packages),
                   (BASE, OS_PACKAGES, VENV_PART, *named, OTHER), tuple(keep))


@dataclass(frozen=True)
class SizeTable:
    #: (part, bytes, files) in the layout's order
    rows: tuple[tuple[str, int, int], ...]
    #: (bytes, files) of other GPUs' device code the final stage deleted from the base
    #: image (packaged ROCm); not in the image, so not in the total.
    device_code_removed: tuple[int, int] | None = None

    @property
    def total(self) -> int:
        return sum(size for _, size, _ in self.rows)

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {
            "total_bytes": self.total,
            "parts": [{"part": p, "bytes": b, "files": f} for p, b, f in self.rows]}
        if self.device_code_removed is not None:
            size, files = self.device_code_removed
            data["device_code_removed"] = {"bytes": size, "files": files}
        return data

    def lines(self) -> list[str]:
        width = max(len(p) for p, _, _ in self.rows)
        out = [f"{'part':{width}}  {'MiB':>9}  {'share':>6}  {'files':>7}"]
        for part, size, files in self.rows:
            share = 100 * size / self.total if self.total else 0.0
            out.append(f"{part:{width}}  {size / (1 << 20):9.1f}  {share:5.1f}%  {files:7d}")
        out.append(f"{'total':{width}}  {self.total / (1 << 20):9.1f}  {100.0:5.1f}%  "
                   f"{sum(f for _, _, f in self.rows):7d}")
        if self.device_code_removed is not None:
            size, files = self.device_code_removed
            out.append(f"{'other GPUs removed':{width}}  {size / (1 << 20):9.1f}  "
                       f"{'':6}  {files:7d}  (device code of other architectures, "
                       "deleted from the base image)")
        return out


def _package_name(entry: str) -> str:
    return entry.split(":", 1)[0]  # libgomp1:amd64 -> libgomp1


def _usrmerged(path: str) -> str:
    """dpkg lists /lib/x that usrmerge keeps at /usr/lib/x (Debian >= 12, Ubuntu >= 20.04)."""
    head = path.split("/", 1)[0]
    return "usr/" + path if head in ("bin", "sbin", "lib", "lib32", "lib64", "libx32") else path


def classify(files: Mapping[str, int], package_files: Mapping[str, Iterable[str]],
             layout: PartLayout) -> dict[str, str]:
    """path -> part, for every path of ``files``."""
    added: set[str] = set()
    for package, paths in package_files.items():
        if _package_name(package) in layout.packages or package in layout.packages:
            for path in paths:
                added.add(path if path in files else _usrmerged(path))
    parts = {}
    for path in files:
        part = next((part for prefix, part in layout.prefixes if path.startswith(prefix)), None)
        if part is None:
            part = OS_PACKAGES if path in added else OTHER if path.startswith(OWN_FILES) else BASE
        parts[path] = part
    return parts


def size_table(files: Mapping[str, int], parts: Mapping[str, str], layout: PartLayout,
               device_code_removed: tuple[int, int] | None = None) -> SizeTable:
    """Sum ``files`` (path -> bytes) by their ``parts`` (from ``classify``), in the
    layout's order of the parts."""
    sizes = dict.fromkeys(layout.parts, 0)
    counts = dict.fromkeys(layout.parts, 0)
    for path, size in files.items():
        sizes[parts[path]] += size
        counts[parts[path]] += 1
    return SizeTable(tuple((p, sizes[p], counts[p]) for p in layout.parts), device_code_removed)


# --- what a lean final stage does not carry ---------------------------------------------------

#: Build-only files, by kind: a match in the final stage means a build step leaked into it.
LEFTOVERS: dict[str, re.Pattern[str]] = {
    "compilers": re.compile(r"^usr/(local/)?bin/(gcc|g\+\+|cc|c\+\+|cpp|clang|clang\+\+|"
                            r"gfortran|make|cmake|ninja)(-[0-9.]+)?$"),
    # C/C++ headers of the system and of install prefixes (/opt/hipblaslt/include); torch's
    # own under site-packages stay (extensions and Triton compile against them at run time)
    "headers": re.compile(r"^(usr|usr/local|opt/[^/]+)/include/.+\.(h|hh|hpp)$"),
    "package caches": re.compile(r"^(var/cache/apt/archives/.+\.deb|"
                                 r"var/lib/apt/lists/[^/]+_(Packages|Sources|InRelease|Release)"
                                 r"(\.[a-z0-9]+)?|root/\.cache/(pip|uv)/.+)$"),
    "build trees": re.compile(r"^(usr/src/.+|.*/CMakeCache\.txt|.*/CMakeFiles/.+)$"),
}


def leftovers(paths: Iterable[str], keep: Iterable[str] = ()) -> dict[str, list[str]]:
    """The build-only files among ``paths``, by kind; paths under ``keep`` (the tuning kit,
    a build tree kept on purpose) are not counted."""
    kept = tuple(k.strip("/") + "/" for k in keep)
    found: dict[str, list[str]] = {}
    for path in paths:
        if kept and path.startswith(kept):
            continue
        for kind, pattern in LEFTOVERS.items():
            if pattern.match(path):
                found.setdefault(kind, []).append(path)
    return {kind: sorted(found[kind]) for kind in found}
