"""The image's bill of materials, CycloneDX 1.6 JSON written with cyclonedx-python-lib.

Components: every wheel of the lock (``pkg:pypi``, sha256 and URL), every OS package of
the final image (its ``/var/lib/dpkg/status``: ``pkg:deb``), every pinned source an image
component is built from (given as data, ``PinnedSource``: a git repository and commit, an
archive's URL and sha256, a source archive of the wheel index), each naming its component
(``imagebuild:component``), and the base image (``pkg:oci`` with its digest). Package URLs follow the purl specification (github.com/package-url/purl-spec,
PURL-TYPES.rst: pypi, deb, oci, github, generic).

The same inputs give the same bytes: the serial number is derived from the lock and the
dpkg database, the timestamp is the squash's reproducible epoch (SOURCE_DATE_EPOCH or the
image creation time), not the wall clock.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from cyclonedx.model import (
    ExternalReference,
    ExternalReferenceType,
    HashAlgorithm,
    HashType,
    Property,
    XsUri,
)
from cyclonedx.model.bom import Bom, BomMetaData
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL

from imagebuild import __version__
from imagebuild.lock.model import Lock, LockedArchive, LockedGit, LockedWheel, PinnedSource

#: Inside the squashfs and SIF (the engine image does not carry it: it is made from the
#: image's files after the build).
IMAGE_SBOM = "opt/imagebuild/sbom.cdx.json"
SCHEMA = "CycloneDX 1.6"


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    architecture: str
    source: str | None = None
    maintainer: str | None = None
    homepage: str | None = None


def dpkg_packages(status: str) -> list[DebPackage]:
    """The installed packages of a dpkg status file (deb-control(5) stanzas); packages only
    configured or removed with their configuration kept are not installed."""
    packages = []
    for stanza in re.split(r"\n\s*\n", status):
        fields: dict[str, str] = {}
        key = ""
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                continue  # continuation line (Description, Conffiles)
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "Package" not in fields or not fields.get("Status", "").endswith(" installed"):
            continue
        source = fields.get("Source", "").split(" ", 1)[0] or None
        packages.append(DebPackage(fields["Package"], fields.get("Version", ""),
                                   fields.get("Architecture", ""), source,
                                   fields.get("Maintainer"), fields.get("Homepage")))
    return sorted(packages, key=lambda p: (p.name, p.architecture))


def _sha256(hex_digest: str) -> HashType:
    return HashType(alg=HashAlgorithm.SHA_256, content=hex_digest)


def _url(kind: ExternalReferenceType, url: str, digest: str | None = None) -> ExternalReference:
    return ExternalReference(type=kind, url=XsUri(url),
                             hashes=[_sha256(digest)] if digest else None)


def _pypi_purl(wheel: LockedWheel) -> PackageURL:
    return PackageURL(type="pypi", name=wheel.name.lower().replace("_", "-"),
                      version=wheel.version, qualifiers={"file_name": wheel.filename})


def wheel_components(lock: Lock) -> Iterator[Component]:
    """Every wheel of the lock, and the ROCm selector sdist built from its pinned bytes."""
    for wheel in (*lock.wheels, *([lock.selector] if lock.selector else [])):
        purl = _pypi_purl(wheel)
        yield Component(
            type=ComponentType.LIBRARY, name=wheel.name, version=wheel.version, purl=purl,
            bom_ref=purl.to_string(), hashes=[_sha256(wheel.sha256)],
            external_references=[_url(ExternalReferenceType.DISTRIBUTION, wheel.url,
                                      wheel.sha256)])


def deb_components(packages: list[DebPackage], os_release: dict[str, str]) -> Iterator[Component]:
    vendor = os_release.get("ID", "debian")
    distro = f"{vendor}-{os_release['VERSION_ID']}" if "VERSION_ID" in os_release else None
    for package in packages:
        qualifiers = {"arch": package.architecture}
        if distro:
            qualifiers["distro"] = distro
        if package.source and package.source != package.name:
            qualifiers["upstream"] = package.source
        purl = PackageURL(type="deb", namespace=vendor, name=package.name,
                          version=package.version, qualifiers=qualifiers)
        yield Component(
            type=ComponentType.LIBRARY, name=package.name, version=package.version, purl=purl,
            bom_ref=purl.to_string(), publisher=package.maintainer,
            external_references=[_url(ExternalReferenceType.WEBSITE, package.homepage)]
            if package.homepage else None)


def _git_purl(git: LockedGit, name: str, subdir: str = ".") -> PackageURL:
    parts = urlsplit(git.repository)
    path = parts.path.strip("/").removesuffix(".git")
    subpath = None if subdir in (".", "") else subdir
    if parts.hostname == "github.com" and path.count("/") == 1:
        owner, repo = path.split("/")
        return PackageURL(type="github", namespace=owner.lower(), name=repo.lower(),
                          version=git.commit, subpath=subpath)
    return PackageURL(type="generic", name=name, version=git.commit, subpath=subpath,
                      qualifiers={"vcs_url": f"git+{git.repository}@{git.commit}"})


def git_component(name: str, git: LockedGit, subdir: str = ".") -> Component:
    purl = _git_purl(git, name, subdir)
    return Component(
        type=ComponentType.LIBRARY, name=name, version=git.commit, purl=purl,
        bom_ref=f"source:{name}", description=f"built from source in the image build ({git.ref})",
        external_references=[_url(ExternalReferenceType.VCS, git.repository)],
        properties=[Property(name="imagebuild:git-ref", value=git.ref),
                    Property(name="imagebuild:git-commit", value=git.commit)]
        + ([Property(name="imagebuild:subdir", value=subdir)] if subdir not in (".", "") else []))


def archive_component(name: str, archive: LockedArchive, version: str | None) -> Component:
    version = version or _archive_version(name, archive.url)
    purl = PackageURL(type="generic", name=name, version=version,
                      qualifiers={"download_url": archive.url,
                                  "checksum": f"sha256:{archive.sha256}"})
    return Component(
        type=ComponentType.LIBRARY, name=name, version=version, purl=purl,
        bom_ref=f"source:{name}", hashes=[_sha256(archive.sha256)],
        description="built from its release archive in the image build",
        external_references=[_url(ExternalReferenceType.SOURCE_DISTRIBUTION, archive.url,
                                  archive.sha256)])


def sdist_component(name: str, sdist: LockedWheel) -> Component:
    """A source archive of the wheel index, built in the image build."""
    return Component(
        type=ComponentType.LIBRARY, name=name, version=sdist.version, purl=_pypi_purl(sdist),
        bom_ref=f"source:{name}", hashes=[_sha256(sdist.sha256)],
        description="built from its source archive in the image build",
        external_references=[_url(ExternalReferenceType.SOURCE_DISTRIBUTION, sdist.url,
                                  sdist.sha256)])


def _archive_version(name: str, url: str) -> str | None:
    match = re.search(rf"{re.escape(name)}-v?([0-9][0-9A-Za-z.+~-]*?)\.(tar|tgz|zip)", url)
    return match.group(1) if match else None


def source_components(sources: tuple[PinnedSource, ...]) -> list[Component]:
    """The pinned sources the image's components are built from, each naming its component."""
    components = []
    for source in sources:
        if isinstance(source.pin, LockedGit):
            component = git_component(source.name, source.pin, source.subdir)
        elif isinstance(source.pin, LockedArchive):
            component = archive_component(source.name, source.pin, source.version)
        else:
            component = sdist_component(source.name, source.pin)
        component.properties.add(Property(name="imagebuild:component", value=source.component))
        components.append(component)
    return components


def base_component(lock: Lock) -> Component:
    reference = lock.base_image.split("@", 1)[0]
    repository, _, tag = reference.rpartition(":")
    if "/" in tag or not repository:  # a registry port, not a tag
        repository, tag = reference, ""
    name = repository.rsplit("/", 1)[-1]
    first = repository.split("/", 1)[0]
    registry = "." in first or ":" in first or first == "localhost"
    # purl-spec oci: repository_url names the registry; Docker Hub when the reference has none
    qualifiers = {"repository_url": repository if registry else f"docker.io/{repository}"}
    if tag:
        qualifiers["tag"] = tag
    purl = PackageURL(type="oci", name=name, version=lock.base_digest, qualifiers=qualifiers)
    return Component(
        type=ComponentType.CONTAINER, name=repository, version=lock.base_digest, purl=purl,
        bom_ref="base-image", hashes=[_sha256(lock.base_digest.removeprefix("sha256:"))],
        description="the base image, pinned by digest")


@dataclass(frozen=True)
class SbomInputs:
    """What the SBOM says besides the image's own dpkg database."""

    recipe: str
    lock: Lock
    #: The pinned sources the image's components are built from, in the registry's order.
    sources: tuple[PinnedSource, ...] = ()


def submodule_components(manifest: Mapping[str, Any]) -> list[Component]:
    """The git submodules a component's build checked out (its manifest section's
    ``submodules``: commit, path, URL), each pinned by the commit of the source the lock
    pins: ``source:<component>/<path>``."""
    found = []
    for section, values in manifest.items():
        rows = values.get("submodules") if isinstance(values, dict) else None
        for row in rows if isinstance(rows, list) else []:
            if not isinstance(row, dict) or not row.get("commit") or not row.get("path"):
                continue
            name = f"{section}/{row['path']}"
            git = LockedGit(repository=str(row.get("url", "")),
                            ref=f"submodule {row['path']} of {section}", commit=row["commit"])
            component = (git_component(name, git) if git.repository else Component(
                type=ComponentType.LIBRARY, name=name, version=git.commit,
                bom_ref=f"source:{name}", description=f"built from source ({git.ref})"))
            component.properties.add(Property(name="imagebuild:component", value=section))
            component.properties.add(Property(name="imagebuild:submodule-of", value=section))
            found.append(component)
    return found


def image_sbom(inputs: SbomInputs, dpkg_status: str, os_release: dict[str, str],
               epoch: int, manifest: Mapping[str, Any] | None = None) -> Bom:
    lock = inputs.lock
    image = Component(
        type=ComponentType.CONTAINER, name=f"imagebuild/{inputs.recipe}",
        version=lock.file_hash(), bom_ref="image",
        description=f"image of recipe {inputs.recipe}, built from the lock "
                    f"{lock.path.name} (version: the lock's sha256)",
        properties=[Property(name="imagebuild:lock-input-hash", value=lock.input_hash)])
    imagebuild = Component(type=ComponentType.APPLICATION, name="imagebuild",
                           version=__version__)
    metadata = BomMetaData(component=image, timestamp=datetime.fromtimestamp(epoch, UTC))
    metadata.tools.components.add(imagebuild)
    serial = uuid.uuid5(uuid.NAMESPACE_URL, "imagebuild:" + inputs.recipe + ":" + lock.file_hash()
                        + ":" + hashlib.sha256(dpkg_status.encode()).hexdigest())
    bom = Bom(serial_number=serial, metadata=metadata)
    components = [
        base_component(lock),
        *source_components(inputs.sources),
        *submodule_components(manifest or {}),
        *wheel_components(lock),
        *deb_components(dpkg_packages(dpkg_status), os_release),
    ]
    for component in components:
        bom.components.add(component)
    bom.register_dependency(image, components)
    return bom


def sbom_json(bom: Bom) -> str:
    return JsonV1Dot6(bom).output_as_string(indent=2) + "\n"


def validation_errors(text: str) -> str | None:
    """None when ``text`` is valid CycloneDX 1.6 JSON (the schema shipped with
    cyclonedx-python-lib, strict: no properties the schema does not define), else why not.
    Needs the library's ``json-validation`` extra (jsonschema)."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    return None if error is None else str(error)
