"""plugin: the image's network plugin release against aws-ofi-nccl's known-bad ranges.

Each range is a release that fixed it (aws/aws-ofi-nccl RELEASENOTES.md), when it applies,
and what works around it until the plugin is rebuilt:
- before 1.17.0 the plugin's tuner refused NCCL_ALGO/NCCL_PROTO: communicator init failed
  with "invalid argument" (aws/aws-ofi-nccl#982; 1.17.0: "Updated v1 and v2 of plugin
  tuner to fallback on nccl tuner when algorithm or protocol is explicitly set");
- before 1.20.0 the tuner crashed when NCCL_ALGO or NCCL_PROTO is set (1.20.0: "Fixed tuner
  segfault when NCCL_ALGO or NCCL_PROTO is explicitly set");
- before 1.20.0 DMA-BUF detection and fd retrieval failed on ROCm 7.x, MI300 and later
  (1.20.0: "... which previously caused domain initialization failures"); the plugin's own
  switch OFI_NCCL_DISABLE_DMABUF=1 keeps DMA-BUF out (include/nccl_ofi_param.h).
The tuner ranges apply where the plugin carries its tuner (exports ncclTunerPlugin_v<N>:
built for AWS, src/Makefile.am adds the tuner sources only with platform-aws) and RCCL loads
it (tuners.py). ROCm's aws-ofi-rccl fork has its own history: the ranges are not its.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .finding import Finding, passed, skipped, warned
from .needs import ImageNeeds
from .node import Node
from .rccl_p2p import version_key

ITEM = "plugin"
UPSTREAM = "aws-ofi-nccl"
#: MI300 and later (the gfx9.4 and gfx9.5 targets).
MI300_AND_LATER = ("gfx94", "gfx95")


@dataclass(frozen=True)
class BadRange:
    fixed_in: str
    what: str
    #: "tuner": with the plugin's tuner and NCCL_ALGO/NCCL_PROTO set; "dmabuf": ROCm >= 7 on
    #: MI300 and later.
    when: str
    workaround: str
    #: What it takes, for a release it cannot hit here.
    needs: str


RANGES = (
    BadRange("1.17.0", "its tuner refuses NCCL_ALGO/NCCL_PROTO (communicator init fails: "
             "aws/aws-ofi-nccl#982)", "tuner", "unset NCCL_ALGO and NCCL_PROTO",
             "its own tuner with NCCL_ALGO/NCCL_PROTO"),
    BadRange("1.20.0", "its tuner crashes when NCCL_ALGO or NCCL_PROTO is set (1.20.0 release "
             "notes)", "tuner", "unset NCCL_ALGO and NCCL_PROTO",
             "its own tuner with NCCL_ALGO/NCCL_PROTO"),
    BadRange("1.20.0", "its DMA-BUF detection fails on ROCm 7.x, MI300 and later: domain "
             "initialization fails (1.20.0 release notes)", "dmabuf",
             "set OFI_NCCL_DISABLE_DMABUF=1",
             "MI300 or later under ROCm 7.x without OFI_NCCL_DISABLE_DMABUF=1"),
)


def applies(bad: BadRange, needs: ImageNeeds, env: Mapping[str, str],
            tuner_loaded: bool | None, targets: tuple[str, ...]) -> bool | None:
    """True, False, or None when it cannot be told (the tuner's presence is not known)."""
    if bad.when == "tuner":
        if not (env.get("NCCL_ALGO") or env.get("NCCL_PROTO")):
            return False
        return tuner_loaded
    if env.get("OFI_NCCL_DISABLE_DMABUF", "").strip() in ("1", "true", "True"):
        return False
    return version_key(needs.rocm)[:1] >= (7,) and any(
        t.startswith(MI300_AND_LATER) for t in targets)


def check(node: Node, needs: ImageNeeds, env: Mapping[str, str], tuner_loaded: bool | None
          ) -> Finding:
    if not needs.plugin:
        return skipped(ITEM, "the image has no network plugin")
    if needs.plugin_kind and needs.plugin_kind != UPSTREAM:
        return skipped(ITEM, f"{needs.plugin_kind}: the known-bad ranges are {UPSTREAM}'s")
    if not needs.plugin_version:
        return skipped(ITEM, "the manifest records no plugin release (a branch or a commit "
                       "was built)")
    release = needs.plugin_version
    older = [bad for bad in RANGES if version_key(release) < version_key(bad.fixed_in)]
    # The node's GPUs where it has any (an MI250X node is not hit by an MI300 bug), else
    # every GPU the image is built for.
    targets = tuple(g.gfx for g in node.gpus()) or needs.gpu_targets
    hits = [(bad, applies(bad, needs, env, tuner_loaded, targets)) for bad in older]
    bad_now = [bad for bad, hit in hits if hit]
    unknown = [bad for bad, hit in hits if hit is None]
    if bad_now:
        fixed = max(b.fixed_in for b in bad_now)
        workarounds = sorted({b.workaround for b in bad_now})
        return warned(ITEM, f"{UPSTREAM} {release}: " + "; ".join(b.what for b in bad_now),
                      f"rebuild with {UPSTREAM} >= {fixed} (the recipe's network_plugin.ref), "
                      f"or {' and '.join(workarounds)}")
    if unknown:
        return warned(ITEM, f"{UPSTREAM} {release} with NCCL_ALGO/NCCL_PROTO set: if RCCL loads "
                      f"the plugin's own tuner, {unknown[0].what}; whether the plugin carries "
                      "one is read from its symbols inside the image",
                      "run the in-image part (python -m imagebuild_checks doctor)")
    if older:
        conditions = sorted({b.needs for b in older})
        return passed(ITEM, f"{UPSTREAM} {release}: none of its known failures applies here "
                      f"(they need {'; or '.join(conditions)})")
    return passed(ITEM, f"{UPSTREAM} {release}: past every known-bad range (fixed in "
                  f"{', '.join(sorted({b.fixed_in for b in RANGES}))})")
