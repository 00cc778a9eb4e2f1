"""Named failure classes in a run's logs, the way AMD's Cluster Validation Suite scans
training logs ("NCCL, GPU HW faults, OOM, and other signatures fail a run early with a
clear reason": https://rocm.docs.amd.com/projects/cvs/en/latest/how-to/test-suites/training/megatron.html),
and the sanity line CSCS's ReFrame xccl check requires on Slingshot.

Classes, each matched on the libraries' own wording:
- nccl_error: RCCL/NCCL errors and the PyTorch watchdog's collective timeouts
  ("NCCL error in: ...", "ncclSystemError", "DistBackendError", "Watchdog caught collective
  operation timeout", an "NCCL WARN" that says something failed);
- nccl_warning: any other "NCCL WARN" line;
- gpu_fault: the GPU faulted ("Memory access fault by GPU node-N", "HW Exception by GPU
  node-N", "an illegal memory access was encountered", hipErrorIllegalAddress);
- oom: out of memory ("torch.OutOfMemoryError: HIP out of memory", "CUDA out of memory",
  hipErrorOutOfMemory, the kernel's OOM killer);
- plugin_fallback: RCCL/NCCL running without the network plugin ("NET/Plugin : No plugin
  found ..., using internal implementation", "Using network Socket");
- cxi_provider: the sanity line, ``NCCL INFO NET/OFI Selected [pP]rovider is cxi``
  (eth-cscs/cscs-reframe-tests checks/microbenchmarks/xccl/xccl_tests.py; aws-ofi-rccl
  prints "Selected Provider is cxi", aws-ofi-nccl "Selected provider is cxi, fabric is
  cxi (found N nics)").
A line belongs to the first class that matches, in this order.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ERROR, WARNING, SANITY = "error", "warning", "sanity"


@dataclass(frozen=True)
class Signature:
    name: str
    severity: str
    pattern: re.Pattern[str]


SIGNATURES = (
    Signature("cxi_provider", SANITY,
              re.compile(r"NCCL INFO NET/OFI Selected [pP]rovider is cxi")),
    Signature("oom", ERROR, re.compile(
        r"OutOfMemoryError|(?:HIP|CUDA) out of memory|hipErrorOutOfMemory|"
        r"Out of memory: Killed process|oom-kill")),
    Signature("gpu_fault", ERROR, re.compile(
        r"Memory access fault by GPU node-\d+|HW Exception by GPU node-\d+|"
        r"illegal memory access was encountered|hipErrorIllegalAddress|"
        r"unspecified launch failure|HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION")),
    Signature("plugin_fallback", WARNING, re.compile(
        r"NET/Plugin\s*:?\s*(?:No plugin found|Could not find|Plugin load returned)|"
        r"using internal implementation|Using internal network plugin|"
        r"Using (?:internal )?[Nn]etwork Socket")),
    Signature("nccl_error", ERROR, re.compile(
        r"NCCL error|\bnccl[A-Z]\w*Error\b|DistBackendError|"
        r"Watchdog caught collective operation timeout|NCCL WARN .*\b(?:failed|[Ee]rror)\b")),
    Signature("nccl_warning", WARNING, re.compile(r"NCCL WARN")),
)
BY_NAME = {s.name: s for s in SIGNATURES}


def classify(line: str) -> Signature | None:
    for signature in SIGNATURES:
        if signature.pattern.search(line):
            return signature
    return None


def scan(lines: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Per class found: how many lines, and the first one (trimmed) with its number."""
    found: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines, start=1):
        signature = classify(line)
        if signature is None:
            continue
        entry = found.setdefault(signature.name, {"severity": signature.severity, "count": 0,
                                                  "first_line": line.strip()[:300],
                                                  "line_number": number})
        entry["count"] += 1
    return found


def errors(found: dict[str, dict[str, Any]]) -> list[str]:
    """One reason per error class found: its name, count and first line."""
    return [f"{name} x{entry['count']}: {entry['first_line'][:200]}"
            for name, entry in found.items() if entry["severity"] == ERROR]
