"""rccl-p2p: the node's kernel against RCCL's cuMem need, with the runtime.

RCCL shares GPU buffers between the processes of a node through cuMem (hipMem) handles
where it can, and "cuMem support requires Linux kernel >= 6.8": below that, it turns cuMem
off (ROCm/rocm-systems projects/rccl/src/misc/rocmwrap.cc, ncclCuMemCapabilityCheck; the
kernel gate came with RCCL 2.28.3, "gated on Linux kernel version", CHANGELOG.md) and takes
the legacy IPC-handle path (hipIpcGetMemHandle) instead. With the RCCL of ROCm 7.14 and
10.0 (2.30.4) on Beverin's 6.4 kernel that path crashes during communicator setup in
20-30 % of two-node MI300A launches with one GPU per rank ("HIP failure: invalid device
pointer") or hangs with several GPUs per rank, under enroot only: the same workload passed
80/80 under the Sarus Suite's Podman. CSCS's images set NCCL_P2P_DISABLE=1 where the
container is not Podman's, unless the user set it (eth-cscs/alps-extended-images,
Alps-Images/ROCm/pytorch-rocm10.0-ubuntu24.04-py3.12-torch2.13/hooks.d/10-rccl-p2p-workaround.sh
and its rocm7.14 twin). The doctor says which applies and the workaround; it never changes
a job's environment (a P2P-less run measures another transport).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .finding import Finding, failed, passed, skipped, warned
from .needs import ImageNeeds
from .node import Node
from .runtime import ENROOT, PODMAN, Runtime, job_nodes

ITEM = "rccl-p2p"
#: The RCCL release each ROCm line ships (the headings of RCCL's CHANGELOG.md, ROCm/rccl
#: and ROCm/rocm-systems projects/rccl: "RCCL 2.30.4 for ROCm 7.14.0", ...).
RCCL_OF_ROCM = {"6.4": "2.22.3", "7.0": "2.26.6", "7.1": "2.27.7", "7.2": "2.27.7",
                "7.11": "2.28.3", "7.12": "2.28.3", "7.13": "2.28.3", "7.14": "2.30.4",
                "10.0": "2.30.4", "10.1": "2.30.7"}
#: The oldest RCCL the failure was seen with (CSCS's ROCm 7.14 and 10.0 images).
FAILING_FROM = (2, 30)
CUMEM_KERNEL = (6, 8)
WORKAROUND = "NCCL_P2P_DISABLE=1"
FIX = (f"set {WORKAROUND} in the job (the EDF's [env], or export it before srun), as CSCS's "
       "images do under enroot; or run under the Sarus Suite (Podman), or on a node with "
       "kernel >= 6.8")


def version_key(text: str | None) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text or "")[:3])


def rccl_of(needs: ImageNeeds) -> tuple[str | None, str]:
    """(RCCL release, where it comes from)."""
    if needs.rccl_version:
        return needs.rccl_version, "the manifest's rccl.version"
    line = needs.rocm_line
    return (RCCL_OF_ROCM.get(line or ""), f"ROCm {line}'s") if line else (None, "")


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def check(node: Node, needs: ImageNeeds, env: Mapping[str, str], runtime: Runtime) -> Finding:
    if not needs.rocm_line:
        return skipped(ITEM, "CPU-only image: no RCCL")
    rccl, origin = rccl_of(needs)
    if rccl is None:
        return skipped(ITEM, f"RCCL of ROCm {needs.rocm} is not in the table (RCCL's "
                       "CHANGELOG.md names each ROCm line's RCCL)")
    if version_key(rccl)[:2] < FAILING_FROM:
        return skipped(ITEM, f"RCCL {rccl} ({origin}): the enroot P2P failure is known with "
                       f"RCCL 2.30 and later (ROCm 7.14, 10.x)")
    release = node.kernel_release()
    if release is None:
        return warned(ITEM, f"RCCL {rccl}: no kernel release readable "
                      "(/proc/sys/kernel/osrelease)", "run doctor on a compute node")
    if version_key(release)[:2] >= CUMEM_KERNEL:
        return passed(ITEM, f"kernel {release} (>= 6.8): RCCL {rccl} can share buffers "
                      "through cuMem")
    below = f"kernel {release} is below 6.8: RCCL {rccl} turns cuMem off and shares buffers " \
            f"through legacy IPC handles"
    if truthy(env.get("NCCL_P2P_DISABLE")):
        return passed(ITEM, f"{below}; NCCL_P2P_DISABLE={env['NCCL_P2P_DISABLE']} is set: "
                      "no P2P transport, intra-node traffic goes through shared memory")
    if env.get("NCCL_NET") == "Socket":
        return passed(ITEM, f"{below}; NCCL_NET=Socket avoids the failing path (at "
                      "socket speed)")
    if runtime.name == PODMAN:
        return passed(ITEM, f"{below}; the runtime is Podman ({runtime.evidence}), under "
                      "which the two-node collectives CSCS ran passed 80/80 with P2P")
    nodes = job_nodes(env)
    risk = ("two-node collectives crash during setup in 20-30 % of launches (one GPU per "
            "rank) or hang (several per rank)")
    if runtime.name != ENROOT:
        where = runtime.name or "not known"
        return warned(ITEM, f"{below}; the runtime is {where} ({runtime.evidence}): under "
                      f"enroot {risk}, under Podman they pass; not known for this runtime",
                      FIX)
    if nodes is not None and nodes > 1:
        return failed(ITEM, f"{below}; under enroot ({runtime.evidence}) in a {nodes}-node "
                      f"job: {risk}", FIX)
    span = "a single-node job" if nodes == 1 else "no SLURM job here"
    return warned(ITEM, f"{below}; under enroot ({runtime.evidence}), {span}: multi-node "
                  f"jobs of this image risk it ({risk})", FIX)
