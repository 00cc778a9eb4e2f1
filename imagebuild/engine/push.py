"""Pushing a built image to a registry, with the manifest digest each tag got."""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.engine.base import Engine
from imagebuild.engine.build import RetryPolicy, classify_failure
from imagebuild.errors import EngineError
from imagebuild.images import ImageRef, split_reference

_DEFAULT_RETRY = RetryPolicy()


@dataclass(frozen=True)
class PushedImage:
    ref: str
    digest: str

    @property
    def pinned(self) -> str:
        """``registry/name@sha256:...``: what a site config or EDF should reference."""
        return f"{split_reference(self.ref)[0]}@{self.digest}"


def registry_reference(ref: str, registry: str) -> str:
    """``imagebuild/rocm:abc`` -> ``REGISTRY/imagebuild/rocm:abc``; a registry already in
    ``ref`` is replaced."""
    registry = registry.rstrip("/")
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        ref = rest
    return f"{registry}/{ref}"


class _TransientPushFailure(Exception):
    def __init__(self, error: EngineError):
        super().__init__(str(error))
        self.error = error


def push_image(engine: Engine, image: ImageRef, registry: str, *,
               retry: RetryPolicy = _DEFAULT_RETRY) -> tuple[PushedImage, ...]:
    """Tag every tag of ``image`` as REGISTRY/name:tag and push it; returns the digests."""
    if not registry.strip("/") or registry.startswith("/") or any(c.isspace() for c in registry):
        raise EngineError(f"--push {registry!r}: expected a registry host[:port][/prefix]")
    pushed = []
    for tag in image.tags or (image.ref,):
        target = registry_reference(tag, registry)
        engine.tag(image.image_id, target)

        def push_once(target: str = target) -> str:
            try:
                return engine.push(target)
            except EngineError as exc:
                if classify_failure(str(exc)).transient:
                    raise _TransientPushFailure(exc) from exc
                raise

        try:
            digest = retry.retrying(_TransientPushFailure)(push_once)
        except _TransientPushFailure as exc:
            raise exc.error from None
        pushed.append(PushedImage(target, digest))
    return tuple(pushed)
