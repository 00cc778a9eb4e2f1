"""devices: each rank has its own GPU, torch has kernels for it, and its CPUs are near it.

Under SLURM ranks and GPUs are not aligned by default: two ranks can land on one GPU
(HIP_VISIBLE_DEVICES vs ROCR_VISIBLE_DEVICES vs the local rank), and a rank's CPU set can
sit on another NUMA node than its GPU. The GPU's NUMA node and its local CPUs come from
/sys/bus/pci/devices/<pci id>/{numa_node,local_cpulist}; the rank's CPUs from
os.sched_getaffinity. When the launcher was meant to bind ranks to cores (``--expect-binding``,
which launchers pass, or Slurm's SLURM_CPU_BIND_TYPE from ``srun --cpu-bind``), a rank
that may run on every core of a node shared with other ranks fails too: its threads
wander across NUMA domains and compete with the other ranks'.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..check_context import Context
from ..gpu import arch_supported
from ..result import FAILED, NO_GPU, PASSED, CheckResult, failed, judge, merge_ranks, skipped

NAME = "devices"

VISIBILITY_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                   "GPU_DEVICE_ORDINAL", "SLURM_LOCALID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def parse_cpulist(text: str) -> set[int]:
    """Kernel cpulist format: '0-7,64-71' (empty for none)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            cpus.update(range(int(low), int(high) + 1))
        else:
            cpus.add(int(part))
    return cpus


def format_cpulist(cpus: set[int] | Sequence[int]) -> str:
    ordered = sorted(set(cpus))
    ranges: list[str] = []
    start: int | None = None
    prev = 0  # read only once start is set
    for cpu in ordered:
        if start is None:
            start = prev = cpu
        elif cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = cpu
    if start is not None:
        ranges.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(ranges)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cpu_numa_nodes(sys_root: Path = Path("/sys")) -> dict[int, set[int]]:
    """NUMA node -> its CPUs."""
    nodes: dict[int, set[int]] = {}
    base = sys_root / "devices" / "system" / "node"
    for entry in sorted(base.glob("node[0-9]*")):
        text = _read(entry / "cpulist")
        if text is not None:
            nodes[int(entry.name[4:])] = parse_cpulist(text)
    return nodes


def numa_distance(node_a: int, node_b: int, sys_root: Path = Path("/sys")) -> int | None:
    text = _read(sys_root / "devices" / "system" / "node" / f"node{node_a}" / "distance")
    if text is None:
        return None
    row = text.split()
    return int(row[node_b]) if 0 <= node_b < len(row) else None


def binding_expected(expect_flag: bool, environ: Mapping[str, str]) -> str | None:
    """Why ranks should be bound to cores (None when nothing says so)."""
    if expect_flag:
        return "--expect-binding"
    bind = environ.get("SLURM_CPU_BIND_TYPE", "").strip().strip(",").lower()
    if bind and bind not in ("none", "verbose,none", "none,verbose"):
        return f"SLURM_CPU_BIND_TYPE={environ['SLURM_CPU_BIND_TYPE']}"
    return None


def affinity_report(affinity: set[int], pci_bus_id: str | None,
                    sys_root: Path = Path("/sys"), expected_binding: str | None = None,
                    ranks_on_node: int = 1) -> tuple[dict[str, Any], list[str], list[str]]:
    """(figures, problems, notes) for one rank's CPU set against its GPU's NUMA locality
    and, when ``expected_binding`` says why, against the binding the launcher promised."""
    figures: dict[str, Any] = {"cpu_affinity": format_cpulist(affinity),
                               "cpu_count": len(affinity)}
    problems: list[str] = []
    notes: list[str] = []
    nodes = cpu_numa_nodes(sys_root)
    rank_nodes = sorted(n for n, cpus in nodes.items() if cpus & affinity)
    figures["cpu_numa_nodes"] = rank_nodes
    node_cpus = set().union(*nodes.values()) if nodes else set(range(os.cpu_count() or 1))
    whole_node = bool(affinity) and node_cpus <= affinity
    figures["whole_node_affinity"] = whole_node
    figures["binding_expected"] = expected_binding
    if whole_node and ranks_on_node > 1:
        line = (f"the rank may run on all {len(node_cpus)} CPUs of the node, shared with "
                f"{ranks_on_node - 1} other rank(s)")
        if expected_binding:
            problems.append(f"{line}, but the launcher was to bind it ({expected_binding}): "
                            "bind ranks to cores near their GPU (srun --cpu-bind=..., a CPU "
                            "mask per rank)")
        else:
            notes.append(f"{line}: not bound")
    if pci_bus_id is None:
        notes.append("GPU PCI address unknown in this torch: NUMA alignment not checked")
        return figures, problems, notes
    device_dir = sys_root / "bus" / "pci" / "devices" / pci_bus_id
    numa_text = _read(device_dir / "numa_node")
    local_text = _read(device_dir / "local_cpulist")
    if numa_text is None:
        notes.append(f"{device_dir} not readable: NUMA alignment not checked")
        return figures, problems, notes
    gpu_node = int(numa_text)
    figures["gpu_numa_node"] = gpu_node
    if local_text:
        figures["gpu_local_cpus"] = local_text
    if gpu_node < 0:
        notes.append("the kernel reports no NUMA node for the GPU (single-node system)")
        return figures, problems, notes
    local_cpus = parse_cpulist(local_text) if local_text else nodes.get(gpu_node, set())
    near = affinity & local_cpus
    figures["cpus_near_gpu_fraction"] = round(len(near) / len(affinity), 3) if affinity else 0.0
    distances = [d for d in (numa_distance(n, gpu_node, sys_root) for n in rank_nodes)
                 if d is not None]
    if distances:
        figures["numa_distance_to_gpu"] = max(distances)
    if affinity and not near:
        problems.append(
            f"CPUs {format_cpulist(affinity)} (NUMA {','.join(map(str, rank_nodes)) or '?'}) are "
            f"all far from GPU {pci_bus_id} on NUMA {gpu_node} (local CPUs {local_text}); "
            f"bind ranks to cores near their GPU (srun --cpu-bind, or a rank-to-GPU map)")
    elif affinity and len(near) < len(affinity):
        notes.append(f"{len(affinity) - len(near)} of {len(affinity)} CPUs of this rank are "
                     f"not on the GPU's NUMA node {gpu_node}")
    return figures, problems, notes


def no_gpu_diagnosis() -> str:
    if getattr(torch.version, "hip", None):
        if not Path("/dev/kfd").exists():
            return "torch is a ROCm build but /dev/kfd is absent (container started without " \
                   "--device /dev/kfd --device /dev/dri?)"
        if not os.access("/dev/kfd", os.R_OK | os.W_OK):
            return "/dev/kfd is not accessible (add the video and render groups)"
        return "torch is a ROCm build but sees no GPU (check HIP/ROCR_VISIBLE_DEVICES)"
    if getattr(torch.version, "cuda", None):
        return "torch is a CUDA build but sees no GPU (container started without --gpus?)"
    return f"torch {torch.__version__} is a CPU-only build"


def run(ctx: Context) -> CheckResult:
    visibility = {k: os.environ[k] for k in VISIBILITY_VARS if k in os.environ}
    affinity = set(os.sched_getaffinity(0))
    if ctx.mode != "gpu" or ctx.gpu is None:
        why = "--cpu given" if ctx.options.cpu else no_gpu_diagnosis()
        figures: dict[str, Any] = {"visible_devices": 0, "visibility_env": visibility}
        # The binding the launcher promised is judged without a GPU too (a SLURM job on
        # CPU nodes binds its ranks the same way).
        binding, problems, _ = affinity_report(
            affinity, None, expected_binding=binding_expected(
                getattr(ctx.options, "expect_binding", False), os.environ),
            ranks_on_node=ctx.local_world_size)
        figures.update(binding)
        if problems:
            return failed(NAME, "; ".join(problems), figures)
        return skipped(NAME, NO_GPU, f"no GPU: {why}", figures)
    gpu = ctx.gpu
    count = torch.cuda.device_count()
    figures = {
        "visible_devices": count, "visibility_env": visibility, "local_rank": ctx.launch.local_rank,
        "local_world_size": ctx.local_world_size, "host": ctx.host, **gpu.to_dict(),
        "gpu_model": ctx.gpu_model, "gpu_matched_by": ctx.gpu_match.how if ctx.gpu_match else None,
    }
    problems = []
    notes: list[str] = []
    arch_list = torch.cuda.get_arch_list()
    figures["torch_arch_list"] = arch_list
    if not arch_supported(gpu.arch, arch_list):
        problems.append(f"torch has no kernels for {gpu.arch} (built for {', '.join(arch_list)})")
    if "HIP_VISIBLE_DEVICES" in visibility and "ROCR_VISIBLE_DEVICES" in visibility:
        notes.append("both HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES are set: HIP indices "
                     "count within the ROCR list")
    aff_figures, aff_problems, aff_notes = affinity_report(
        affinity, gpu.pci_bus_id, expected_binding=binding_expected(
            getattr(ctx.options, "expect_binding", False), os.environ),
        ranks_on_node=ctx.local_world_size)
    figures.update(aff_figures)
    problems += aff_problems
    notes += aff_notes
    figures["notes"] = notes
    ok = (f"rank {ctx.rank} on {gpu.name} ({gpu.arch}, {gpu.memory_gib:.0f} GiB, "
          f"{gpu.pci_bus_id or 'PCI ?'}), CPUs {format_cpulist(affinity)}")
    return judge(NAME, problems, ok, figures)


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    """Per-rank results, plus what no single rank can see: two ranks on one GPU."""
    merged = merge_ranks(results, ctx.hosts)
    owners: dict[tuple[str, str], list[int]] = {}
    for rank, result in enumerate(results):
        figures = result.figures
        ident = figures.get("uuid") or figures.get("pci_bus_id")
        if ident:
            owners.setdefault((figures.get("host") or "?", str(ident)), []).append(rank)
    shared = [(host, ident, ranks) for (host, ident), ranks in owners.items() if len(ranks) > 1]
    if not shared:
        if merged.status == PASSED and len(results) > 1:
            merged = CheckResult(merged.name, merged.status,
                                 f"{len(results)} ranks on {ctx.nodes} node(s), one GPU each; "
                                 + merged.reason, merged.figures, merged.cause, merged.details,
                                 merged.duration_s)
        return merged
    lines = [f"ranks {', '.join(map(str, ranks))} on {host} share GPU {ident}"
             for host, ident, ranks in shared[:3]]
    hint = "give each rank its own GPU (srun --gpus-per-task=1, or one rank per visible GPU)"
    reason = "; ".join(lines) + f"; {hint}"
    if merged.status == FAILED:
        reason = f"{reason}; {merged.reason}"
    return CheckResult(merged.name, FAILED, reason, merged.figures, None, merged.details,
                       merged.duration_s)
