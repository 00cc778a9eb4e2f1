"""driver: the node's amdgpu kernel driver against the image's ROCm release.

ROCm's user space (in the image) talks to the kernel-mode driver (on the host) through
the KFD interface; AMD tests each driver release with a window of ROCm releases
(driver_compat.json, a source per row). The driver's own version is hard to read: AMD's
DKMS module reports a kernel-style MODULE_VERSION (/sys/module/amdgpu/version, e.g.
6.16.6), which the table maps to the driver release (30.20); the kernel's in-tree amdgpu
reports none.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .finding import Finding, failed, passed, skipped, warned
from .needs import ImageNeeds
from .node import Node

ITEM = "driver"
TABLE = Path(__file__).with_name("driver_compat.json")


def load_table(path: Path = TABLE) -> dict[str, Any]:
    return json.loads(path.read_text())


def _key(line: str) -> tuple[int, ...]:
    return tuple(int(p) for p in line.split(".") if p.isdigit())


def check(node: Node, needs: ImageNeeds, table: dict[str, Any]) -> Finding:
    if not needs.rocm_line:
        return skipped(ITEM, "CPU-only image: no GPU driver needed")
    if not node.amdgpu_loaded():
        return warned(ITEM, "no amdgpu driver loaded (no /sys/module/amdgpu): not a GPU node, "
                      "or /sys is hidden", "run doctor on a compute node of the partition the "
                      "job uses (srun -N1 imagebuild doctor ...)")
    module = node.amdgpu_version()
    if module is None:
        kernel = node.kernel_release() or "unknown"
        return warned(ITEM, f"amdgpu is the kernel's own (no module version; kernel {kernel}): "
                      f"AMD's table covers its DKMS driver only", f"ask the site which ROCm "
                      f"releases this kernel's amdgpu supports (the image needs {needs.rocm})")
    mapped = next((row for row in table["module_versions"]
                   if _key(module)[:3] == _key(row["module"])[:3]), None)
    if mapped is None:
        return warned(ITEM, f"amdgpu {module} is not in the compatibility table", "compare it "
                      f"with AMD's matrix by hand ({table['policy_source']}) and add a row to "
                      f"driver_compat.json with its source")
    driver = mapped["driver"]
    row = next((r for r in table["drivers"] if r["driver"] == driver), None)
    label = f"amdgpu {module} (driver {driver})"
    if row is None:
        return warned(ITEM, f"{label}: the table lists no tested ROCm releases for driver "
                      f"{driver}; the image needs ROCm {needs.rocm}", "check AMD's matrix "
                      f"({table['policy_source']}): releases up to a year apart are supported")
    tested = row["tested_rocm"]
    if needs.rocm_line in tested:
        return passed(ITEM, f"{label} is tested with ROCm {', '.join(tested)}; the image has "
                      f"{needs.rocm}")
    older = _key(needs.rocm_line) < min(_key(t) for t in tested)
    fix = (f"use an image with ROCm {tested[0]} or newer" if older else
           f"use an image with ROCm {tested[-1]} or older, or ask the site for a newer driver")
    return failed(ITEM, f"{label} is tested with ROCm {tested[0]} to {tested[-1]}; the image "
                  f"has {needs.rocm}, {'older' if older else 'newer'} than that", fix)
