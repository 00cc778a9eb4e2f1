"""Manifests, tags and blobs of a registry, read and written through its HTTP API (the OCI
distribution spec, https://github.com/opencontainers/distribution-spec/blob/main/spec.md):
no image is pulled. Promotion sets tags with it (imagebuild.promote); a build attaches its
SBOM to the pushed image with it (imagebuild.build.sbom_attach).

Setting a tag puts the manifest bytes the source tag returns under the new tag, in the same
repository, so both name the same digest (what ``skopeo copy`` does within one repository,
without copying a blob).

Credentials: $IMAGEBUILD_REGISTRY_USER and $IMAGEBUILD_REGISTRY_PASSWORD (the pipelines'
secrets), else the ``auths`` entry ``docker login`` or ``podman login --authfile
~/.docker/config.json`` wrote for the registry (credential helpers are not read), else
anonymous. A registry that answers 401 with a Bearer challenge gets a token for the
repository from its realm (https://distribution.github.io/distribution/spec/auth/token/).
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import requests

from imagebuild.errors import PromoteError
from imagebuild.files import sha256_bytes
from imagebuild.http import GaveUp, HttpClient, Retryable, is_retryable_status
from imagebuild.images import is_loopback_registry

#: What a GET of a tag accepts: an index first (a multi-platform image, or one with
#: BuildKit's attestation manifest), then a single manifest.
MANIFEST_TYPES = ", ".join((  # noqa: FLY002 (one type per line reads better)
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))
_REFERENCE = re.compile(r"^(?P<registry>[A-Za-z0-9.-]+(?::[0-9]+)?)/(?P<repository>"
                        r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)"
                        r"[a-z0-9]+)*)*)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
                        r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")
USER_ENV = "IMAGEBUILD_REGISTRY_USER"
PASSWORD_ENV = "IMAGEBUILD_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Reference:
    """``registry/repository[:tag][@digest]``, the registry named explicitly."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @classmethod
    def parse(cls, ref: str, what: str = "image") -> Reference:
        match = _REFERENCE.match(ref)
        host = match["registry"] if match else ""
        if match is None or not ("." in host or ":" in host or host == "localhost"):
            raise PromoteError(f"{what} {ref!r}: expected registry/repository:tag, the "
                                "registry named (e.g. registry.example.org/hpc/rocm:tag)")
        return cls(match["registry"], match["repository"], match["tag"], match["digest"])

    def with_tag(self, tag: str) -> Reference:
        return Reference(self.registry, self.repository, tag)

    def __str__(self) -> str:
        return (f"{self.registry}/{self.repository}" + (f":{self.tag}" if self.tag else "")
                + (f"@{self.digest}" if self.digest else ""))


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes


def _docker_config_auth(registry: str, environ: Mapping[str, str]) -> str | None:
    config = Path(environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    try:
        auths = json.loads(config.read_text()).get("auths") or {}
    except (OSError, ValueError):
        return None
    for key in (registry, f"https://{registry}", f"http://{registry}"):
        entry = auths.get(key) or {}
        if entry.get("auth"):
            return str(entry["auth"])
    return None


class RegistryClient:
    """Manifests and tags of one registry."""

    def __init__(self, registry: str, *, http: HttpClient | None = None,
                 environ: Mapping[str, str] | None = None):
        self.registry = registry
        self.http = http or HttpClient()
        environ = os.environ if environ is None else environ
        user, password = environ.get(USER_ENV), environ.get(PASSWORD_ENV)
        self._basic = (base64.b64encode(f"{user}:{password}".encode()).decode()
                       if user and password else _docker_config_auth(registry, environ))
        self._tokens: dict[str, str] = {}
        scheme = "http" if is_loopback_registry(registry) else "https"
        self.base = f"{scheme}://{registry}/v2"

    # -- requests ------------------------------------------------------------------------
    def _request(self, method: str, repository: str, path: str, *, push: bool = False,
                 headers: Mapping[str, str] | None = None, data: bytes | None = None
                 ) -> requests.Response:
        url = f"{self.base}/{repository}/{path}"
        scope = f"repository:{repository}:{'pull,push' if push else 'pull'}"

        def once() -> requests.Response:
            sent = dict(headers or {})
            if scope in self._tokens:
                sent["Authorization"] = self._tokens[scope]
            response = self.http.session.request(method, url, headers=sent, data=data,
                                                 timeout=self.http.policy.timeout)
            if response.status_code == 401 and scope not in self._tokens:
                self._tokens[scope] = self._authorization(
                    response.headers.get("WWW-Authenticate", ""), scope, url)
                sent["Authorization"] = self._tokens[scope]
                response = self.http.session.request(method, url, headers=sent, data=data,
                                                     timeout=self.http.policy.timeout)
            if is_retryable_status(response.status_code):
                raise Retryable(f"HTTP {response.status_code} from {method} {url}")
            return response

        try:
            return self.http.attempt(once, label=f"{method} {url}")
        except GaveUp as exc:
            raise PromoteError(f"registry {self.registry} did not answer {method} {url}: "
                                f"{exc.reason}") from None

    def _authorization(self, challenge: str, scope: str, url: str) -> str:
        if challenge.lower().startswith("basic") and self._basic:
            return f"Basic {self._basic}"
        if not challenge.lower().startswith("bearer "):
            raise PromoteError(f"{url}: the registry asks for credentials",
                                hint=f"set {USER_ENV} and {PASSWORD_ENV}, or log in first")
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", "")
        params["scope"] = scope
        headers = {"Authorization": f"Basic {self._basic}"} if self._basic else {}
        response = self.http.session.get(realm, params=params, headers=headers,
                                         timeout=self.http.policy.timeout)
        if response.status_code != 200:
            raise PromoteError(f"token service {realm} refused {scope} "
                                f"(HTTP {response.status_code})",
                                hint=f"set {USER_ENV} and {PASSWORD_ENV} to an account that "
                                     "may push there")
        body = response.json()
        return f"Bearer {body.get('token') or body.get('access_token')}"

    @staticmethod
    def _check(response: requests.Response, what: str) -> None:
        if response.status_code >= 400:
            detail = response.text.strip().splitlines()[0][:200] if response.text.strip() \
                else ""
            raise PromoteError(f"{what}: HTTP {response.status_code}"
                                + (f" ({detail})" if detail else ""))

    # -- manifests and tags ------------------------------------------------------------
    def manifest(self, ref: Reference) -> Manifest | None:
        """The manifest a tag or digest names, as the registry stores it; None when the
        tag does not exist."""
        response = self._request("GET", ref.repository, f"manifests/{ref.digest or ref.tag}",
                                 headers={"Accept": MANIFEST_TYPES})
        if response.status_code == 404:
            return None
        self._check(response, f"GET manifest {ref}")
        digest = response.headers.get("Docker-Content-Digest") or \
            "sha256:" + sha256_bytes(response.content)
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip() or \
            json.loads(response.content).get("mediaType", "")
        return Manifest(digest, media_type, response.content)

    def digest(self, ref: Reference) -> str | None:
        found = self.manifest(ref)
        return found.digest if found else None

    def put_manifest(self, ref: Reference, manifest: Manifest) -> str:
        """Put ``manifest`` under ``ref``'s tag; returns the digest the registry gives it."""
        response = self._request("PUT", ref.repository, f"manifests/{ref.tag}", push=True,
                                 headers={"Content-Type": manifest.media_type},
                                 data=manifest.body)
        self._check(response, f"PUT manifest {ref}")
        return response.headers.get("Docker-Content-Digest") or manifest.digest

    def put_blob(self, ref: Reference, data: bytes) -> str:
        """Upload ``data`` to ``ref``'s repository (one monolithic PUT); its digest."""
        digest = "sha256:" + sha256_bytes(data)
        if self._request("HEAD", ref.repository, f"blobs/{digest}").status_code == 200:
            return digest
        started = self._request("POST", ref.repository, "blobs/uploads/", push=True)
        self._check(started, f"POST blob upload to {ref.registry}/{ref.repository}")
        location = started.headers.get("Location", "")
        path = location.split(f"/v2/{ref.repository}/", 1)[-1]
        separator = "&" if "?" in path else "?"
        done = self._request("PUT", ref.repository, f"{path}{separator}digest={digest}",
                             push=True, data=data,
                             headers={"Content-Type": "application/octet-stream"})
        self._check(done, f"PUT blob {digest} to {ref.registry}/{ref.repository}")
        return digest

    def tags(self, ref: Reference) -> list[str]:
        """Every tag of ``ref``'s repository (the registry's paging followed)."""
        found: list[str] = []
        path = "tags/list?n=1000"
        while path:
            response = self._request("GET", ref.repository, path)
            if response.status_code == 404:
                return found
            self._check(response, f"GET tags of {ref.registry}/{ref.repository}")
            found += response.json().get("tags") or []
            link = re.search(r"<[^>]*/tags/list\?([^>]*)>", response.headers.get("Link", ""))
            path = f"tags/list?{link[1]}" if link else ""
        return found
