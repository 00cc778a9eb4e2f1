"""gfx: every GPU of the node is a target the image is built for.

The image's targets are its manifest's gpu_targets: the recipe's, for which the build
compiles its own device code (and checks it where it can read the offload bundles, e.g.
rccl-tests); the wheels' device code is what their index publishes for the release.
Where the final stage's device-code diet ran (packaged ROCm: needs.py), its report says
which targets' kernel files the image kept, and how many each kernel library torch loads
has per target: rocBLAS and hipBLASLt find their kernels by architecture in file names
and fail without them ("No paths matched"); MIOpen without a database compiles at run
time, so it is not required.

A GPU whose target (the KFD topology's gfx_target_version) the image has no code
objects for fails at its first kernel with "invalid device function" (HIP's
hipErrorInvalidDeviceFunction), or torch reports "no kernel image is available".
"""

from __future__ import annotations

from .finding import Finding, failed, passed, skipped, warned
from .needs import DEVICE_CODE_FILE as REPORT
from .needs import ImageNeeds
from .node import Node

ITEM = "gfx"
#: Kernel libraries that work without files for a target: MIOpen compiles kernels at run
#: time when it has no database for the architecture.
OPTIONAL_KERNELS = ("libMIOpen",)


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
    if needs.device_code_targets is not None:
        problem = device_code_problem(needs, here)
        if problem:
            return failed(ITEM, problem, f"add {', '.join(here)} to the recipe's gpu_targets "
                          "and rebuild (the final stage then keeps and checks its kernels)")
    checked = (f"; {REPORT} keeps their kernels ({len(needs.kernel_libraries)} kernel "
               "libraries)" if needs.device_code_targets is not None else "")
    return passed(ITEM, f"{len(gpus)} GPU(s), {', '.join(here)}: the image is built for "
                  f"{', '.join(sorted(image))}{checked}")


def device_code_problem(needs: ImageNeeds, here: list[str]) -> str | None:
    """What the device-code report says is missing for the node's targets ``here``."""
    kept = sorted({base_target(t) for t in needs.device_code_targets or ()})
    gone = [t for t in here if t not in kept]
    if gone:
        return (f"node has {', '.join(here)}; {REPORT} keeps device code for "
                f"{', '.join(kept) or 'no target'} only: kernels fail with 'invalid device "
                f"function'")
    for library in needs.kernel_libraries:
        counts: dict[str, int] = {}
        for target, files in library.files:
            counts[base_target(target)] = counts.get(base_target(target), 0) + files
        empty = [t for t in here if counts.get(t) == 0]
        if empty and library.stem not in OPTIONAL_KERNELS:
            return (f"{library.library} has no kernel files for {', '.join(empty)} in "
                    f"{library.kernels} ({REPORT}): it fails there ('No paths matched')")
    return None
