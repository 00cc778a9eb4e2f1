"""Wheel index client: list a flat wheel directory and pin the exact file for a version.

The index is shaped like https://repo.radeon.com/rocm/manylinux/rocm-rel-7.0.2/: a plain
HTML link listing (usable as a pip/uv --find-links page) with URL-encoded hrefs (``%2B`` for
``+``), relative or absolute. Link texts are ignored: autoindex pages truncate long names.
A local directory of wheels (a path or a file:// URL) works the same way, for air-gapped
sites. One directory often holds several builds of one torch version that differ only in
the git hash of the local version (``2.8.0+rocm7.0.2.lw.git245bf6ed``), so ``find``
matches the version exactly, local part included, and a miss names the closest files
that do exist.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit
from urllib.request import url2pathname

import requests
from packaging.tags import Tag
from packaging.utils import (
    BuildTag,
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from imagebuild.errors import WheelIndexError
from imagebuild.http import HttpClient

CLOSEST_SHOWN = 5
#: Source archive names (PEP 625 and the older .zip).
SDIST_SUFFIXES = (".tar.gz", ".zip")


@dataclass(frozen=True)
class IndexFile:
    """One wheel in a listing. ``name`` is the canonical (PEP 503) project name."""

    filename: str
    url: str
    name: str
    version: Version
    tags: frozenset[Tag]
    build: BuildTag = ()
    sha256: str | None = field(default=None, compare=False)  # from a "#sha256=" fragment
    #: A source archive (name-version.tar.gz), not a wheel: no tags.
    sdist: bool = False

    @property
    def python_tags(self) -> str:
        """e.g. "cp312" or "py3", for messages."""
        return ".".join(sorted({t.interpreter for t in self.tags}))


def parse_listing(html: str, base_url: str) -> list[IndexFile]:
    """The wheels and source archives linked from an HTML listing; other links (../, dirs)
    are skipped."""
    parser = _LinkParser()
    parser.feed(html)
    parser.close()
    base = urljoin(base_url, parser.base) if parser.base else base_url
    files: dict[str, IndexFile] = {}
    for href in parser.hrefs:
        url, fragment = urldefrag(urljoin(base, href.strip()))
        filename = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        wheel = _distribution(filename, url, _fragment_sha256(fragment))
        if wheel is not None:
            files.setdefault(wheel.filename, wheel)  # a listing may link a file twice
    return sorted(files.values(), key=lambda f: f.filename)


def list_directory(directory: Path) -> list[IndexFile]:
    """The wheels and source archives in a local directory, with file:// URLs."""
    files = []
    for entry in os.scandir(directory):
        if entry.is_file():
            wheel = _distribution(entry.name, Path(entry.path).resolve().as_uri(), None)
            if wheel is not None:
                files.append(wheel)
    return sorted(files, key=lambda f: f.filename)


def _distribution(filename: str, url: str, sha256: str | None) -> IndexFile | None:
    if filename.endswith(SDIST_SUFFIXES):
        try:
            name, version = parse_sdist_filename(filename)
        except (InvalidSdistFilename, InvalidVersion):
            return None
        return IndexFile(filename=filename, url=url, name=str(name), version=version,
                         tags=frozenset(), sha256=sha256, sdist=True)
    if not filename.endswith(".whl"):
        return None
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None  # not a wheel pip/uv would install either
    return IndexFile(filename=filename, url=url, name=str(name), version=version,
                     tags=frozenset(tags), build=build, sha256=sha256)


def _fragment_sha256(fragment: str) -> str | None:
    # PEP 503: "#sha256=<hex>"; repo.radeon.com publishes none, simple indexes do.
    key, _, value = fragment.partition("=")
    return value.lower() if key == "sha256" and len(value) == 64 else None


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []
        self.base: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if not href:
            return
        if tag == "a":
            self.hrefs.append(href)
        elif tag == "base" and self.base is None:
            self.base = href


# --------------------------------------------------------------------------- compatibility


def supported_tags(python: str = "3.12", platform: str = "linux_x86_64") -> list[Tag]:
    """Tags a CPython ``python`` on Linux ``platform`` installs, most specific first.

    ``platform`` names the architecture family: "linux_x86_64" accepts linux_x86_64 and
    every manylinux x86_64 tag (the wheels' glibc floor is the base image's business);
    "manylinux_2_28_x86_64" accepts manylinux up to glibc 2.28 and linux_x86_64.
    """
    from packaging import tags as ptags

    major, minor = _python_version(python)
    platforms = _platforms(platform)
    found = list(ptags.cpython_tags((major, minor), abis=[f"cp{major}{minor}"],
                                    platforms=platforms))
    found += ptags.compatible_tags((major, minor), f"cp{major}{minor}", platforms)
    return list(dict.fromkeys(found))


def _python_version(python: str) -> tuple[int, int]:
    parts = python.strip().removeprefix("cp").split(".")
    if len(parts) == 1 and parts[0].isdigit() and len(parts[0]) >= 2:  # "312" / "cp312"
        parts = [parts[0][0], parts[0][1:]]
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise WheelIndexError(f"python version {python!r}: expected MAJOR.MINOR, e.g. 3.12")
    return int(parts[0]), int(parts[1])


_LEGACY_MANYLINUX = {"manylinux2014": (2, 17), "manylinux2010": (2, 12), "manylinux1": (2, 5)}


def _platforms(platform: str) -> list[str]:
    platform = platform.strip()
    if platform.startswith("linux_"):
        arch, glibc_max = platform.removeprefix("linux_"), (2, 50)
    elif platform.startswith("manylinux_"):
        _, major, minor, arch = platform.split("_", 3)
        if not (major.isdigit() and minor.isdigit()):
            raise WheelIndexError(f"platform {platform!r}: expected manylinux_X_Y_ARCH")
        glibc_max = (int(major), int(minor))
    else:
        raise WheelIndexError(
            f"platform {platform!r}: expected linux_ARCH or manylinux_X_Y_ARCH")
    platforms = [f"manylinux_{glibc_max[0]}_{m}_{arch}" for m in range(glibc_max[1], 4, -1)]
    platforms += [f"{legacy}_{arch}" for legacy, floor in _LEGACY_MANYLINUX.items()
                  if floor <= glibc_max]
    return platforms + [f"linux_{arch}"]


# --------------------------------------------------------------------------- the index


class WheelIndex:
    """A wheel listing at ``location``: an http(s) URL, a file:// URL or a directory path.

    ``simple``: ``location`` is a PEP 503 simple index root, whose project ``name`` lists its
    files at ``<location>/<normalized name>/`` (TheRock's per-family ROCm indexes), instead
    of one flat listing of every file (repo.radeon.com).
    """

    def __init__(self, location: str | os.PathLike[str], *, simple: bool = False,
                 session: requests.Session | None = None,
                 timeout: float | tuple[float, float] | None = None,
                 retries: int | None = None,
                 backoff: float | None = None,
                 http: HttpClient | None = None):
        location = os.fspath(location)
        scheme = urlsplit(location).scheme
        if scheme in ("http", "https"):
            self.url = location
            self._directory: Path | None = None
        elif scheme == "file":
            self._directory = Path(url2pathname(urlsplit(location).path))
            self.url = location
        elif scheme and len(scheme) > 1:  # "C:" is a drive, anything longer a scheme
            raise WheelIndexError(
                f"wheel index {location}: expected an http(s) or file URL, or a directory")
        else:
            self._directory = Path(location).expanduser().resolve()
            self.url = str(self._directory)
        self.location = location
        self.http = http if http is not None else HttpClient.configured(
            session=session, retries=retries, timeout=timeout, backoff=backoff)
        self.simple = simple
        self._files: list[IndexFile] | None = None
        self._projects: dict[str, list[IndexFile]] = {}

    def __repr__(self) -> str:
        return f"WheelIndex({self.location!r})"

    def files(self) -> list[IndexFile]:
        """Every wheel in the listing, sorted by filename; fetched once per object."""
        return [f for f in self._listing() if not f.sdist]

    def _listing(self) -> list[IndexFile]:
        if self._files is None:
            self._files = self._load()
        return self._files

    def _load(self) -> list[IndexFile]:
        if self._directory is not None:
            if not self._directory.is_dir():
                raise WheelIndexError(f"wheel index {self.url}: no such directory")
            return list_directory(self._directory)
        html, final_url = self.http.get_text(self.url, what="wheel index",
                                             error=WheelIndexError)
        return parse_listing(html, final_url)

    def files_for(self, name: str) -> list[IndexFile]:
        """The project's wheels."""
        return [f for f in self._project_files(name) if not f.sdist]

    def _project_files(self, name: str) -> list[IndexFile]:
        wanted = canonicalize_name(name)
        if not self.simple:
            return [f for f in self._listing() if f.name == wanted]
        if wanted not in self._projects:
            self._projects[wanted] = [f for f in self._load_project(wanted) if f.name == wanted]
        return list(self._projects[wanted])

    def find_sdist(self, name: str, version: str) -> IndexFile:
        """The source archive of exactly ``name==version`` (projects the index publishes
        only as source, e.g. TransformerEngine's PyTorch extension)."""
        wanted = Version(version)
        found = [f for f in self._project_files(name) if f.sdist and f.version == wanted]
        if found:
            return min(found, key=lambda f: (not f.filename.endswith(".tar.gz"),
                                                f.filename))
        others = sorted(f.filename for f in self._project_files(name))
        raise WheelIndexError(
            f"{name}=={version}: no source archive in wheel index {self.url}"
            + (f" (it has: {', '.join(others[:CLOSEST_SHOWN])})" if others else
               f" (no file of {canonicalize_name(name)} at all)"),
            hint="check the release's listing for the TransformerEngine version it publishes")

    def project_url(self, name: str) -> str:
        """PEP 503: a project's page is the root URL plus its normalized name and "/"."""
        return self.url.rstrip("/") + "/" + canonicalize_name(name) + "/"

    def _load_project(self, project: str) -> list[IndexFile]:
        if self._directory is not None:
            directory = self._directory / project
            return list_directory(directory) if directory.is_dir() else []
        found = self.http.get_text_if_present(self.project_url(project), what="wheel index",
                                              error=WheelIndexError)
        return parse_listing(*found) if found is not None else []

    def find(self, name: str, version: str, python: str = "3.12",
             platform: str = "linux_x86_64") -> IndexFile:
        """The one file for exactly ``name==version`` (local part included) on the target.

        Among several compatible files (e.g. cp312-cp312 and py3-none-any) the most
        specific tag wins, as pip and uv choose.
        """
        try:
            wanted_version = Version(version)
        except InvalidVersion:
            raise WheelIndexError(
                f"{name}=={version}: not a valid version (PEP 440) for wheel index {self.url}"
            ) from None
        priority = {tag: rank for rank, tag in enumerate(supported_tags(python, platform))}
        same_project = self.files_for(name)
        ranked = []
        for candidate in same_project:
            if candidate.version != wanted_version:
                continue
            ranks = [priority[t] for t in candidate.tags if t in priority]
            if ranks:
                ranked.append((min(ranks), _build_rank(candidate.build), candidate.filename,
                               candidate))
        if ranked:
            return min(ranked)[3]
        raise WheelIndexError(self._missing_message(name, version, python, platform,
                                                    same_project))

    def pythons_for(self, name: str, version: str, candidates: Iterable[str] = (),
                    platform: str = "linux_x86_64") -> tuple[str, ...]:
        """The CPython versions (``3.13``) with a wheel of exactly ``name==version`` on
        ``platform``: each one some file of the project names (``cp313``), and each of
        ``candidates``, that a file of that version installs on (an abi3 or py3 wheel
        serves every one)."""
        try:
            wanted = Version(version)
        except InvalidVersion:
            return ()
        files = [f for f in self.files_for(name) if f.version == wanted]
        named = {f"{int(t.interpreter[2])}.{t.interpreter[3:]}" for f in files
                 for t in f.tags if re.fullmatch(r"cp3\d+", t.interpreter)}
        served = [python for python in {*named, *candidates}
                  if any(f.tags & set(supported_tags(python, platform)) for f in files)]
        return tuple(sorted(served, key=_python_version))

    def _missing_message(self, name: str, version: str, python: str, platform: str,
                         same_project: list[IndexFile]) -> str:
        major, minor = _python_version(python)
        wanted = f"{canonicalize_name(name)}=={version} (cp{major}{minor}, {platform})"
        if not same_project and self.simple:
            return (f"{wanted} is not in {self.url}: {self.project_url(name)} lists no "
                    "wheels of it (is the GPU family's index the right one?)")
        if not same_project:
            others = sorted({f.name for f in self.files()})
            if not others:
                return f"{wanted} is not in {self.url}: the listing holds no wheels"
            near = difflib.get_close_matches(canonicalize_name(name), others, n=CLOSEST_SHOWN,
                                             cutoff=0.6)
            hint = f"did you mean {', '.join(near)}? " if near else ""
            return (f"{wanted} is not in {self.url}: no {canonicalize_name(name)} wheels there;"
                    f" {hint}projects: {', '.join(others[:20])}"
                    + (", ..." if len(others) > 20 else ""))
        closest = _closest(version, f"cp{major}{minor}", same_project)
        return f"{wanted} is not in {self.url}: closest: {', '.join(closest)}"


def _build_rank(build: BuildTag) -> int:
    """Sort key: under min(), the highest build number wins, no build tag comes last (pip)."""
    return -build[0] if build else 1


def _closest(version: str, python_tag: str, files: list[IndexFile]) -> list[str]:
    """Filenames ranked: the requested version's other builds and Python tags first."""

    def score(f: IndexFile) -> tuple[float, float, str]:
        version_likeness = difflib.SequenceMatcher(None, version, str(f.version)).ratio()
        same_python = 1.0 if python_tag in f.python_tags.split(".") else 0.0
        return (-version_likeness, -same_python, f.filename)

    return [f.filename for f in sorted(files, key=score)[:CLOSEST_SHOWN]]
