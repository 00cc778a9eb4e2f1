"""The build's CycloneDX SBOM attached to the pushed image in the registry, whatever engine
built it.

imagebuild writes the SBOM itself, from the image's files (imagebuild.convert.sbom), for
docker and podman alike; BuildKit's own SBOM attestation needs its scanner image
(docker/buildkit-syft-scanner, from Docker Hub) and podman has none. After a push the SBOM
goes to the image's repository as an OCI artifact: an image manifest whose
``artifactType`` is CycloneDX, whose one layer is the SBOM and whose ``subject`` is the
pushed manifest, so a registry that serves the OCI 1.1 referrers API lists it under the
image (https://github.com/opencontainers/image-spec/blob/main/manifest.md). It is also
tagged ``sha256-<hex of the image digest>.sbom``, the tag cosign gives an attached SBOM, for
registries without that API.
"""

from __future__ import annotations

import json
from pathlib import Path

from imagebuild.engine.push import PushedImage
from imagebuild.errors import PromoteError
from imagebuild.oci_registry import Manifest, Reference, RegistryClient

CYCLONEDX = "application/vnd.cyclonedx+json"
EMPTY_CONFIG = "application/vnd.oci.empty.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def sbom_tag(image_digest: str) -> str:
    return image_digest.replace(":", "-") + ".sbom"


def attach_sbom(pushed: PushedImage, sbom: Path, *, client_for=RegistryClient) -> str:
    """Put ``sbom`` beside the pushed image; returns the SBOM artifact's reference."""
    image = Reference.parse(pushed.ref)
    client = client_for(image.registry)
    subject = client.manifest(Reference(image.registry, image.repository, digest=pushed.digest))
    if subject is None:
        raise PromoteError(f"{pushed.pinned}: not in the registry after its push")
    data = sbom.read_bytes()
    empty = b"{}"
    layer = {"mediaType": CYCLONEDX, "digest": client.put_blob(image, data), "size": len(data),
             "annotations": {"org.opencontainers.image.title": sbom.name}}
    body = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": CYCLONEDX,
        "config": {"mediaType": EMPTY_CONFIG, "digest": client.put_blob(image, empty),
                   "size": len(empty)},
        "layers": [layer],
        "subject": {"mediaType": subject.media_type, "digest": subject.digest,
                    "size": len(subject.body)},
    }, separators=(",", ":"), sort_keys=True).encode()
    target = image.with_tag(sbom_tag(pushed.digest))
    digest = client.put_manifest(target, Manifest("", OCI_MANIFEST, body))
    return f"{target}@{digest}"
