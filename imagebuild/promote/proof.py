"""The tested marker and the stable tag: what may be promoted, and what never moves.

The practice of CSCS's image pipeline (eth-cscs/alps-extended-images, ci-pipelines/
child-templates.yaml): an image is built once under its canonical tag (here the input hash
``imagebuild build`` tags it with), tested on the target nodes, then marked
``<canonical-tag>-tested-<validation-hash>`` at the digest that was tested; publication
re-checks that the marker and the canonical tag name the same digest, and a stable tag,
once set, is never moved.

- ``mark_tested``: the report must be a complete, passed ``imagebuild validate`` run of the
  image *by digest* (``validate REGISTRY/NAME@sha256:...``), and that digest must be what
  the canonical tag names now. The marker's hash is the report file's sha256 (12 digits),
  so a marker names the run that proved it. A marker is never moved either.
- ``promote_stable``: refused unless a marker of the canonical tag names the canonical
  tag's digest (the marker of one report when ``report`` is given), and refused when the
  stable tag exists at another digest. Setting it again at the same digest does nothing.

A registry has no compare-and-set for tags: between the check and the write another
promotion could set the same stable tag. The generated pipelines run promotions one at a
time (GitHub ``concurrency``, GitLab ``resource_group``), and the tag is read back after
the write.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import PromoteError
from imagebuild.files import sha256_bytes
from imagebuild.oci_registry import Reference, RegistryClient

MARKER_INFIX = "-tested-"
#: Digits of the report's sha256 in a marker tag.
HASH_DIGITS = 12
_MARKER = re.compile(rf"^(?P<canonical>.+){MARKER_INFIX}(?P<hash>[0-9a-f]{{{HASH_DIGITS}}})$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_IN_REF = re.compile(r"@(sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class Outcome:
    """What a promotion step did: ``changed`` False when the tag was already there."""

    ref: Reference
    digest: str
    changed: bool
    #: the marker that proved it (promote_stable)
    marker: str | None = None


def report_hash(report: Path) -> str:
    return sha256_bytes(report.read_bytes())[:HASH_DIGITS]


def marker_tag(canonical_tag: str, validation_hash: str) -> str:
    tag = f"{canonical_tag}{MARKER_INFIX}{validation_hash}"
    if not _TAG.match(tag):
        raise PromoteError(f"marker tag {tag!r} is not a valid tag (at most 128 characters)")
    return tag


def _canonical(image: str, client_for) -> tuple[Reference, RegistryClient, str]:
    ref = Reference.parse(image)
    if not ref.tag:
        raise PromoteError(f"image {image!r}: name its canonical tag "
                           "(registry/repository:<input hash>), the tag being proven")
    if _MARKER.match(ref.tag):
        raise PromoteError(f"image {image!r}: a tested marker, not a canonical tag")
    client = client_for(ref.registry)
    digest = client.digest(ref.with_tag(ref.tag))
    if digest is None:
        raise PromoteError(f"image {ref.with_tag(ref.tag)} not found in the registry",
                           hint="push it first: imagebuild build RECIPE --push REGISTRY")
    if ref.digest and ref.digest != digest:
        raise PromoteError(f"image {image}: the tag {ref.tag} names {digest} now, not "
                           f"{ref.digest}")
    return ref, client, digest


def _read_report(report: Path, allow_cpu: bool) -> dict:
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PromoteError(f"{report}: not a readable validation report ({exc})") from exc
    summary = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(summary, dict):
        raise PromoteError(f"{report}: no summary: not an `imagebuild validate` report")
    if data.get("complete") is False or summary.get("incomplete"):
        raise PromoteError(f"{report}: the validation did not finish; an unfinished run "
                           "proves nothing")
    if summary.get("exit_code") != 0 or summary.get("failed"):
        failed = ", ".join(summary.get("failed_checks") or []) or "see the report"
        raise PromoteError(f"{report}: the validation failed ({failed}); only a passed run "
                           "marks an image tested")
    if summary.get("skipped_no_gpu") and not allow_cpu:
        raise PromoteError(f"{report}: a CPU-mode run ({summary['skipped_no_gpu']} checks "
                           "skipped for want of a GPU)",
                           hint="validate on a GPU node, or pass --allow-cpu where the "
                                "project validates without GPUs")
    return data


def mark_tested(image: str, report: Path, *, allow_cpu: bool = False,
                client_for=RegistryClient) -> Outcome:
    """Tag the digest the report validated ``<canonical-tag>-tested-<report hash>``."""
    data = _read_report(report, allow_cpu)
    ref, client, digest = _canonical(image, client_for)
    validated = _DIGEST_IN_REF.search(str(data.get("image") or ""))
    if validated is None:
        raise PromoteError(f"{report}: validated {data.get('image')!r}, not an image by "
                           "digest: the run cannot be tied to what the tag names",
                           hint=f"validate {ref.registry}/{ref.repository}@{digest}")
    if validated[1] != digest:
        raise PromoteError(f"{report}: validated {validated[1]}, but {ref} names {digest} "
                           "now (the tag moved after the validation)",
                           hint="validate the image the tag names, then mark it")
    assert ref.tag is not None
    marker = ref.with_tag(marker_tag(ref.tag, report_hash(report)))
    existing = client.digest(marker)
    if existing == digest:
        return Outcome(marker, digest, changed=False)
    if existing is not None:
        raise PromoteError(f"{marker} already names {existing}; a marker never moves")
    manifest = client.manifest(ref.with_tag(ref.tag))
    assert manifest is not None
    client.put_manifest(marker, manifest)
    return Outcome(marker, _read_back(client, marker, digest), changed=True)


def promote_stable(image: str, stable_tag: str, *, report: Path | None = None,
                   client_for=RegistryClient) -> Outcome:
    """Set ``stable_tag`` on the canonical tag's digest, if a marker proves it and the
    stable tag does not name another image already."""
    if not _TAG.match(stable_tag) or _MARKER.match(stable_tag):
        raise PromoteError(f"stable tag {stable_tag!r}: expected a tag like 2025.06 or "
                           "v1.2 (letters, digits, '.', '_', '-'; not a tested marker)")
    ref, client, digest = _canonical(image, client_for)
    assert ref.tag is not None
    if stable_tag == ref.tag:
        raise PromoteError(f"stable tag {stable_tag!r} is the canonical tag itself")
    marker = _proving_marker(client, ref, digest, report)
    stable = ref.with_tag(stable_tag)
    existing = client.digest(stable)
    if existing == digest:
        return Outcome(stable, digest, changed=False, marker=marker)
    if existing is not None:
        raise PromoteError(f"{stable} names {existing}; promoting {ref} ({digest}) would "
                           "move it, and a stable tag never moves",
                           hint="promote under a new stable tag")
    manifest = client.manifest(ref.with_tag(ref.tag))
    assert manifest is not None
    client.put_manifest(stable, manifest)
    return Outcome(stable, _read_back(client, stable, digest), changed=True, marker=marker)


def _proving_marker(client: RegistryClient, ref: Reference, digest: str,
                    report: Path | None) -> str:
    assert ref.tag is not None
    if report is not None:
        candidates = [marker_tag(ref.tag, report_hash(report))]
    else:
        candidates = sorted(tag for tag in client.tags(ref) if (found := _MARKER.match(tag))
                            and found["canonical"] == ref.tag)
    elsewhere = []
    for tag in candidates:
        at = client.digest(ref.with_tag(tag))
        if at == digest:
            return tag
        if at is not None:
            elsewhere.append(f"{tag} ({at})")
    raise PromoteError(
        f"no tested marker of {ref} names its digest {digest}"
        + (f"; markers of other digests: {', '.join(elsewhere)} (the tag moved after "
           "validation)" if elsewhere else
           f" ({'no marker of that report' if report else 'no marker at all'})"),
        hint=f"validate {ref.registry}/{ref.repository}@{digest} and mark it: imagebuild "
             "promote tested IMAGE --report REPORT")


def _read_back(client: RegistryClient, ref: Reference, digest: str) -> str:
    found = client.digest(ref)
    if found != digest:
        raise PromoteError(f"{ref} names {found} after it was set to {digest}: another "
                           "promotion wrote it at the same time")
    return digest
