"""gfx: every GPU of the node is a target the image is built for.

The image's targets are its manifest's gpu_targets: the recipe's, for which the build
compiles its own device code (and checks it where it can read the offload bundles, e.g.
rccl-tests); the wheels' device code is what their index publishes for the release.

A GPU whose target (the KFD topology's gfx_target_version) the image has no code
objects for fails at its first kernel with "invalid device function" (HIP's
hipErrorInvalidDeviceFunction), or torch reports "no kernel image is available".
"""

from __future__ import annotations

from .finding import Finding, failed, passed, skipped, warned
from .needs import ImageNeeds
from .node import Node

ITEM = "gfx"


def base_target(target: str) -> str:
    """"gfx90a:xnack+" -> "gfx90a": feature suffixes narrow, never widen, a target."""
    return target.split(":", 1)[0]


def check(node: Node, needs: ImageNeeds) -> Finding:
    if not needs.rocm:
        return skipped(ITEM, "CPU-only image")
    gpus = node.gpus()
    if not gpus:
        return warned(ITEM, "no GPU in the KFD topology (/sys/class/kfd): nothing to compare",
                      "run doctor on a compute node with its GPUs allocated")
    image = {base_target(t) for t in needs.gpu_targets}
    here = sorted({g.gfx for g in gpus})
    if not image:
        return warned(ITEM, f"node has {', '.join(here)}; the manifest names no GPU targets",
                      "rebuild the image so its manifest records gpu_targets")
    missing = [t for t in here if t not in image]
    if missing:
        return failed(ITEM, f"node has {', '.join(here)}; the image is built for "
                      f"{', '.join(sorted(image))} only: kernels fail with 'invalid device "
                      f"function'", f"add {', '.join(missing)} to the recipe's gpu_targets "
                      f"and rebuild")
    return passed(ITEM, f"{len(gpus)} GPU(s), {', '.join(here)}: the image is built for "
                  f"{', '.join(sorted(image))}")
