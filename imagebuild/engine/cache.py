"""A build cache kept in a registry, one entry per Dockerfile stage, shared by every runner.

CI runners start empty: without a cache that outlives them, each run of the matrix compiles
hipBLASLt again. BuildKit and buildah both keep build results in a registry; they address
them differently, so each engine says how it passes a ``RegistryCache`` on
(imagebuild.engine.docker, imagebuild.engine.podman):

- BuildKit (``docker buildx build``): one cache manifest per reference
  (``--cache-to type=registry,ref=REF,mode=max``, https://docs.docker.com/build/cache/backends/registry/).
  imagebuild gives every stage a reference of its own, ``REPOSITORY:<stage>-<key>``, the key
  a digest of the stage's instructions, the context files it uses and the keys of the
  stages it builds on (imagebuild.build.stage_plan.stage_cache_keys): two recipes with an
  identical stage (rocm-7.0.2 and rocm-7.0.2-swiss-ai share hipBLASLt, the plugins and
  rccl-tests) name the same entry. A build imports every stage's entry; once it succeeded,
  each stage is exported to its own entry (a build of that stage alone, all from the
  local cache, ``--output type=cacheonly``).
- buildah (``podman build``): one image per instruction, tagged with buildah's own content
  key in one repository (``--cache-to REPOSITORY --cache-from REPOSITORY``, pushed as it
  builds, https://docs.podman.io/en/latest/markdown/podman-build.1.html); identical steps of
  two recipes get the same key.

The build arguments stay out of the keys: the lock's SOURCE_DATE_EPOCH changes with every
re-lock, yet the steps before a stage's ``ARG SOURCE_DATE_EPOCH`` (hipBLASLt's compile) do
not depend on it. The engines' own per-instruction keys decide what is reused; the stage
keys only say where to look.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from imagebuild.errors import EngineError

#: A registry repository without tag or digest: host[:port]/path (the path lower case, as
#: the OCI distribution spec names repositories).
CACHE_REPOSITORY = re.compile(
    r"^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+$")


def checked_repository(value: str, flag: str) -> str:
    """``value`` when it names a registry repository (no tag, no digest); else EngineError."""
    host = value.split("/", 1)[0]
    names_registry = "." in host or ":" in host or host == "localhost"
    if not CACHE_REPOSITORY.match(value) or not names_registry:
        raise EngineError(f"{flag} {value!r}: expected a registry repository like "
                          "registry.example.org/hpc/imagebuild-cache (host[:port]/path, "
                          "no tag)")
    return value


@dataclass(frozen=True)
class RegistryCache:
    """Where a build looks for earlier results of its stages and where it puts its own."""

    #: repository to import from (None: import nothing)
    cache_from: str | None = None
    #: repository to export to (None: export nothing)
    cache_to: str | None = None
    #: stage -> cache key, for the stages this build makes (the target and what it uses)
    stage_keys: Mapping[str, str] = field(default_factory=dict)

    def stage_ref(self, repository: str, stage: str) -> str:
        """BuildKit's reference of one stage's entry: ``REPOSITORY:<stage>-<key>``."""
        return f"{repository}:{stage}-{self.stage_keys[stage]}"

    def import_refs(self) -> list[str]:
        if self.cache_from is None:
            return []
        return [self.stage_ref(self.cache_from, stage) for stage in self.stage_keys]

    def export_refs(self) -> dict[str, str]:
        """stage -> reference its entry is exported to (in build order)."""
        if self.cache_to is None:
            return {}
        return {stage: self.stage_ref(self.cache_to, stage) for stage in self.stage_keys}


def buildkit_import_flags(cache: RegistryCache | None) -> list[str]:
    flags: list[str] = []
    for ref in cache.import_refs() if cache else ():
        flags += ["--cache-from", f"type=registry,ref={ref}"]
    return flags


def buildkit_export_flags(ref: str) -> list[str]:
    """``mode=max``: every step of the stage, not only the layers of its result (which is
    all ``mode=min`` and BUILDKIT_INLINE_CACHE keep)."""
    return ["--cache-to", f"type=registry,ref={ref},mode=max", "--output", "type=cacheonly"]
