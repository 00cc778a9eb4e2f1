"""xnack: the XNACK mode a job asks for (HSA_XNACK, and the image's target features)
against the mode the kernel gives (amdgpu.noretry).

XNACK lets a GPU retry an access that faulted, so pages can migrate on demand (unified
memory, which MI300A's shared HBM is built for). The kernel decides whether retry is
possible: "To enable page fault based memory management on most GFXv9 GPUs, set the
module parameter amdgpu.noretry=0"
(https://github.com/torvalds/linux/blob/master/drivers/gpu/drm/amd/amdkfd/Kconfig,
HSA_AMD_SVM); its default (-1) is noretry on for gfx90a and gfx942
(amdgpu_gmc_noretry_set in drivers/gpu/drm/amd/amdgpu/amdgpu_gmc.c). HSA_XNACK=1 asks
the runtime for XNACK; with retry off the process runs without it, and memory the GPU
faults on is not migrated: the job dies on a GPU memory fault. Code objects built for
":xnack+" or ":xnack-" load only in that mode.
"""

from __future__ import annotations

from .finding import Finding, failed, passed, skipped
from .needs import ImageNeeds
from .node import Node

ITEM = "xnack"


def kernel_retry(noretry: int | None) -> bool | None:
    """Whether the kernel lets the GPUs retry faults (XNACK possible); None: unknown."""
    if noretry is None:
        return None
    return noretry == 0


def check(node: Node, needs: ImageNeeds, env: dict[str, str]) -> Finding:
    if not needs.rocm:
        return skipped(ITEM, "CPU-only image")
    gpus = node.gpus()
    if not gpus:
        return skipped(ITEM, "no GPU in the KFD topology")
    retry = kernel_retry(node.noretry())
    requested = env.get("HSA_XNACK")
    apu = any(g.apu for g in gpus)
    kind = "APU (MI300A-like)" if apu else "GPU"
    if retry is None:
        return skipped(ITEM, "amdgpu.noretry not readable (/sys/module/amdgpu/parameters)")
    noretry = node.noretry()
    mode = "XNACK possible (amdgpu.noretry=0)" if retry else \
        f"XNACK off (amdgpu.noretry={noretry}{', the driver default' if noretry == -1 else ''})"
    forced = sorted({t.split(":", 1)[1] for t in needs.gpu_targets if ":" in t})
    if "xnack+" in " ".join(forced) and not retry:
        return failed(ITEM, f"{kind}: {mode}, but the image's code is built for xnack+ only",
                      "build for the plain target (no :xnack+), or boot the nodes with "
                      "amdgpu.noretry=0")
    if requested == "1" and not retry:
        return failed(ITEM, f"{kind}: HSA_XNACK=1, but {mode}: the runtime cannot enable it "
                      f"and pages the GPU faults on are not migrated", "unset HSA_XNACK (and "
                      "allocate GPU memory explicitly), or use nodes booted with "
                      "amdgpu.noretry=0")
    if requested == "1" and "xnack-" in " ".join(forced):
        return failed(ITEM, f"{kind}: HSA_XNACK=1, but the image's code is built for xnack- "
                      "only: it will not load", "unset HSA_XNACK, or build for the plain target")
    state = "on (HSA_XNACK=1)" if requested == "1" else "off (HSA_XNACK unset)" \
        if requested is None else f"off (HSA_XNACK={requested})"
    return passed(ITEM, f"{kind}: {mode}; the job runs with XNACK {state}")
