"""The non-Python pins: each enabled component's git sources (the commit its ref names, by
``git ls-remote``) and archives (their bytes' sha256), and the base image's digest."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from imagebuild.errors import CommandFailed, SourceError
from imagebuild.lock.model import ArchivePin, GitPin, LockedArchive, LockedGit, LockedSource, Pin
from imagebuild.lock.options import LockOptions, mirrored
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

if TYPE_CHECKING:
    from imagebuild.lock.cache import DownloadCache

Progress = Callable[[str], None]


def pin_sources(pins: list[Pin], options: LockOptions, cache: DownloadCache,
                 previous: dict[str, str], progress: Progress) -> dict[str, LockedSource]:
    """The components' git sources (the commit of each ref) and archives (their bytes'
    sha256, checked against the current lock's), by key, in the order pinned."""
    sources: dict[str, LockedSource] = {}
    for pin in pins:
        if isinstance(pin, GitPin):
            progress(f"git ls-remote {pin.source.repository}")
            sources[pin.key] = resolve_git(pin.source.repository, pin.source.ref,
                                           options.git_mirrors)
        elif isinstance(pin, ArchivePin):
            url = mirrored(pin.url, options.git_mirrors)
            progress(f"{pin.key} {url}")
            archive = cache.fetch(url, expected_sha256=previous.get(url.rsplit("/", 1)[-1]))
            sources[pin.key] = LockedArchive(url=url, sha256=archive.sha256, size=archive.size)
    return sources


def resolve_git(repository: str, ref: str, mirrors: Mapping[str, str],
                runner: CommandRunner = DEFAULT_RUNNER) -> LockedGit:
    url = mirrored(repository, mirrors)
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return LockedGit(repository=url, ref=ref, commit=ref)
    try:
        result = runner.capture(["git", "ls-remote", "--", url, ref, f"{ref}^{{}}"],
                                step="git ls-remote", timeout=120, check=False,
                                env={**os.environ, "GIT_TERMINAL_PROMPT": "0"})
    except CommandFailed:  # with check=False, only the timeout raises
        raise SourceError(f"git ls-remote {url} {ref}: timed out after 120 s") from None
    if result.returncode != 0:
        detail = result.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SourceError(f"git ls-remote {url}: failed: {detail[0]}")
    refs: dict[str, str] = {}
    for line in result.stdout.splitlines():
        commit, _, name = line.partition("\t")
        refs[name] = commit
    # An annotated tag's peeled entry (^{}) names the commit; prefer it over the tag object.
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        if name in refs:
            return LockedGit(repository=url, ref=ref, commit=refs[name])
    raise SourceError(f"{url}: no branch or tag named {ref!r}")


def resolve_base_digest(reference: str) -> str:
    if "@sha256:" in reference:
        return reference.split("@", 1)[1]
    from imagebuild.lock.registry import resolve_image_digest

    return resolve_image_digest(reference)
