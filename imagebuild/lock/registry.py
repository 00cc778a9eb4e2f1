"""Base image digests from a container registry's HTTP API (OCI distribution spec).

The lock pins the recipe's base image to the digest its tag points to now, so a rebuild
months later starts from the same bytes; push reuses ``ImageName`` to parse references.
Spec: https://github.com/opencontainers/distribution-spec/blob/main/spec.md
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import requests

from imagebuild.errors import SourceError
from imagebuild.files import sha256_bytes
from imagebuild.http import GaveUp, HttpClient, Retryable, is_retryable_status, is_transient
from imagebuild.images import is_loopback_registry, split_reference

# Asking for an index first: a multi-arch tag then resolves to its index digest, which is
# what `docker pull name@digest` expects.
MANIFEST_MEDIA_TYPES = ", ".join((  # noqa: FLY002 (one type per line reads better)
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
DIGEST_PATTERN = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class ImageName:
    """A parsed image reference, normalized like docker does (docker.io, library/)."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @classmethod
    def parse(cls, ref: str) -> ImageName:
        rest, _, digest = ref.partition("@")
        first, slash, remainder = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, remainder
        else:
            registry, path = "docker.io", rest
        repository, tag = split_reference(path)
        if not repository or not re.fullmatch(r"[a-z0-9]+(?:[._\-/][a-z0-9]+)*", repository):
            raise SourceError(f"image reference {ref!r}: invalid repository name")
        if registry == "docker.io" and "/" not in repository:
            repository = f"library/{repository}"
        if digest and not DIGEST_PATTERN.match(digest):
            raise SourceError(f"image reference {ref!r}: digest must be sha256:<64 hex>")
        return cls(registry, repository, tag or (None if digest else "latest"), digest or None)

    @property
    def api_base(self) -> str:
        host = "registry-1.docker.io" if self.registry == "docker.io" else self.registry
        scheme = "http" if is_loopback_registry(host) else "https"
        return f"{scheme}://{host}/v2"


def _bearer_token(challenge: str, http: HttpClient) -> str | None:
    """Anonymous token for a ``WWW-Authenticate: Bearer realm=...`` challenge (Docker Hub)."""
    if not challenge.lower().startswith("bearer "):
        return None
    params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = params.pop("realm", None)
    if not realm:
        return None
    response = http.session.get(realm, params=params, timeout=http.policy.timeout)
    if response.status_code >= 500:
        raise Retryable(f"token service {realm}: HTTP {response.status_code}")
    if response.status_code != 200:
        return None
    body = response.json()
    return body.get("token") or body.get("access_token")


def resolve_image_digest(ref: str, *, http: HttpClient | None = None) -> str:
    """The manifest (list) digest ``sha256:...`` a tag points to, from the registry's HTTP API.

    Uses HEAD (Docker Hub does not count HEAD against pull limits) and the
    Docker-Content-Digest header, falling back to hashing the GET body. Multi-arch tags
    resolve to their index digest, as ``docker pull name@digest`` expects. Retries and
    timeouts are those of ``http`` (default: IMAGEBUILD_HTTP_RETRIES/_TIMEOUT).
    """
    name = ImageName.parse(ref)
    if name.digest:
        return name.digest
    http = http if http is not None else HttpClient()
    url = f"{name.api_base}/{name.repository}/manifests/{name.tag}"
    headers = {"Accept": MANIFEST_MEDIA_TYPES}

    def request(method: str) -> requests.Response:
        response = http.session.request(method, url, headers=headers,
                                        timeout=http.policy.timeout)
        if response.status_code == 401 and "Authorization" not in headers:
            token = _bearer_token(response.headers.get("WWW-Authenticate", ""), http)
            if token is None:
                raise SourceError(f"image {ref}: registry {name.registry} requires credentials "
                                  "(anonymous token refused)")
            headers["Authorization"] = f"Bearer {token}"
            response = http.session.request(method, url, headers=headers,
                                            timeout=http.policy.timeout)
        if response.status_code in (401, 403, 404):
            # Docker Hub answers 401 for repositories that do not exist
            raise SourceError(f"image {ref}: tag {name.tag} not found in "
                              f"{name.registry}/{name.repository} (HTTP {response.status_code})")
        if is_retryable_status(response.status_code):
            raise Retryable(f"HTTP {response.status_code} from {method} {url}")
        return response

    def attempt() -> str:
        try:
            response = request("HEAD")
            digest = response.headers.get("Docker-Content-Digest", "")
            if response.status_code == 200 and DIGEST_PATTERN.match(digest):
                return digest
            # No HEAD support (405) or no digest header: hash the manifest bytes themselves.
            response = request("GET")
            if response.status_code != 200:
                raise SourceError(f"image {ref}: unexpected HTTP {response.status_code} "
                                  f"from GET {url}")
            digest = response.headers.get("Docker-Content-Digest", "")
            return digest if DIGEST_PATTERN.match(digest) else "sha256:" + sha256_bytes(
                response.content)
        except (requests.ConnectionError, requests.Timeout) as exc:
            if is_transient(exc):
                raise Retryable(f"{url}: {exc}") from exc
            raise

    try:
        return http.attempt(attempt)
    except GaveUp as exc:
        attempts = f"{exc.attempts} attempt{'s' if exc.attempts != 1 else ''}"
        raise SourceError(f"image {ref}: registry {name.registry} unreachable after "
                          f"{attempts}: {exc.reason}") from None
