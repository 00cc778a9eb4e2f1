"""Which libfabric the RCCL network plugin may be built against: the sites' policy.

libfabric versions its symbols. Each ABI change adds a version tag (FABRIC_1.x) and a new
default version of the functions whose structures changed, ``fi_getinfo`` among them; a
plugin linked against a release needs that release's tag, and the dynamic loader refuses
it against an older libfabric (``version 'FABRIC_1.8' not found``). RCCL then reports
that no plugin was found and runs over sockets. So the plugin is built against a release
whose ABI every site the recipe targets provides, or the recipe is refused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from imagebuild.errors import RenderError

if TYPE_CHECKING:
    from imagebuild.recipe.site import SiteProfile

#: (first release, the newest ABI tag it defines), newest first: the release that first
#: lists each FABRIC_1.x in libfabric.map.in (git history of ofiwg/libfabric, checked up to
#: v2.6.0). A release defines every tag up to its own.
ABI_BY_RELEASE: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = (
    ((2, 5), (1, 9)),
    ((2, 0), (1, 8)),
    ((1, 20), (1, 7)),
    ((1, 14), (1, 6)),
    ((1, 13), (1, 5)),
    ((1, 12), (1, 4)),
    ((1, 9), (1, 3)),
    ((1, 7), (1, 2)),
    ((1, 5), (1, 1)),
    ((0, 0), (1, 0)),
)


def release_tuple(release: str) -> tuple[int, int]:
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def abi_of(release: str) -> tuple[int, int]:
    """The newest FABRIC_x.y tag libfabric ``release`` (like "1.22.0") defines."""
    wanted = release_tuple(release)
    return next(abi for first, abi in ABI_BY_RELEASE if wanted >= first)


def abi_name(abi: tuple[int, int]) -> str:
    return f"FABRIC_{abi[0]}.{abi[1]}"


@dataclass(frozen=True)
class LibfabricTarget:
    """The libfabric releases the plugin must load against, and the tag that bounds it."""

    #: The release the image builds and links the plugin against (the recipe's).
    build_release: str
    #: The oldest release the plugin must load with: the oldest a target site binds, else
    #: the image's own.
    oldest_release: str
    #: Where ``oldest_release`` comes from, for messages: "sites lumi, cscs-beverin".
    oldest_from: str
    #: The newest symbol version tag the plugin may need: the oldest release's ABI.
    max_abi: str


def libfabric_target(where: str, build: str, sites: Sequence[SiteProfile],
                     providers: tuple[str, ...] = ()) -> LibfabricTarget:
    """The libfabric constraints of a plugin built against libfabric ``build`` (with
    ``providers`` beyond the built-in ones: the image's CXI stack) for the recipe at
    ``where`` and its ``sites``; RenderError when the sites' policy and that release cannot
    work together."""
    bound: list[tuple[str, SiteProfile]] = []
    for site in sites:
        policy = site.libfabric
        if policy is None:
            continue
        if policy.provided_by == "image":
            wanted = site.network.provider
            if wanted and wanted not in providers:
                raise RenderError(
                    f"{where}: sites: site {site.name} ({site.source}) runs on the image's own "
                    f"libfabric (libfabric.provided_by: image) with provider {wanted}, which "
                    f"the image's libfabric {build} does not have (its providers: "
                    f"{', '.join(providers) or 'the built-in ones only'})",
                    hint="enable the cxi_stack section (libfabric with HPE's cxi provider, "
                         "which the plugin is then built against), or use a profile whose "
                         "site binds its own libfabric (provided_by: site)")
            continue
        if policy.version is not None:
            bound.append((policy.version, site))
    if not bound:
        return LibfabricTarget(build, build, "the image's own libfabric", abi_name(abi_of(build)))
    oldest = min(release_tuple(version) for version, _ in bound)
    oldest_sites = [site for version, site in bound if release_tuple(version) == oldest]
    oldest_release = next(v for v, _ in bound if release_tuple(v) == oldest)
    names = ", ".join(site.name for site in oldest_sites)
    target = LibfabricTarget(build, oldest_release,
                             f"site{'s' if len(oldest_sites) > 1 else ''} {names}",
                             abi_name(abi_of(oldest_release)))
    if abi_of(build) > abi_of(oldest_release):
        raise RenderError(
            f"{where}: network_plugin.libfabric.version: a plugin built against libfabric "
            f"{build} needs {abi_name(abi_of(build))}, which libfabric {oldest_release} "
            f"(bound at run time by {target.oldest_from}) does not provide (it has up to "
            f"{target.max_abi}); the plugin would not load there and RCCL would fall back "
            "to sockets",
            hint=f"build against a libfabric release with at most {target.max_abi}, e.g. "
                 f"{oldest_release}, or drop the site from the recipe's sites")
    return target
