"""gpu: each GPU bound, 256 MB allocated and a 2048x2048 bf16 GEMM checked finite, in a
process of its own that the screen kills at a hard timeout.

A GPU whose driver is stuck blocks inside ``torch.cuda.set_device`` (a driver call no
signal interrupts): only killing the process from outside bounds it, which is what AMD
Primus's node_smoke does with its per-GPU subprocess and 15 s timeout
(https://rocm.docs.amd.com/projects/primus/en/latest/02-user-guide/node-smoke-test-instruction.html).
All GPUs are probed at once, so the node's screen takes about one probe's time.

``python -m <package>.screen.gpu_probe INDEX [--cpu]`` prints one JSON line. ``--cpu``
runs the same steps on the CPU: a proxy, labelled so, that proves the machinery (the
subprocess, the timeout, the report) where no GPU is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from ..package_path import package_root

#: Hook for the tests: ``IMAGEBUILD_TEST_SCREEN_HANG=INDEX`` makes that probe hang as a
#: wedged device would.
HANG_ENV = "IMAGEBUILD_TEST_SCREEN_HANG"
ALLOC_BYTES = 256 * 2**20
SIZE = 2048
PREFIX = "@@imagebuild-gpu-probe "


def probe(index: int, cpu: bool) -> dict[str, Any]:
    if os.environ.get(HANG_ENV) == str(index):
        time.sleep(3600)
    import torch

    out: dict[str, Any] = {"index": index, "device": "cpu" if cpu else f"gpu {index}"}
    begin = time.perf_counter()
    if cpu:
        device = torch.device("cpu")
    else:
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
        out["name"] = torch.cuda.get_device_name(index)
    out["bind_s"] = round(time.perf_counter() - begin, 3)
    begin = time.perf_counter()
    block = torch.empty(ALLOC_BYTES, dtype=torch.uint8, device=device)
    block.fill_(1)
    out["alloc_s"] = round(time.perf_counter() - begin, 3)
    gen = torch.Generator(device=device).manual_seed(index)
    a = torch.randn(SIZE, SIZE, generator=gen, device=device).to(torch.bfloat16)
    b = torch.randn(SIZE, SIZE, generator=gen, device=device).to(torch.bfloat16)
    begin = time.perf_counter()
    c = a @ b
    finite = bool(torch.isfinite(c).all().item())
    nonzero = bool((c != 0).any().item())
    out["gemm_s"] = round(time.perf_counter() - begin, 4)
    out["finite"] = finite and nonzero
    del block
    return out


@dataclass(frozen=True)
class ProbeResult:
    index: int
    ok: bool
    reason: str
    seconds: float
    figures: dict[str, Any]


def start(index: int, cpu: bool) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(package_root()),
                                                    env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen([sys.executable, "-m", f"{__package__}.gpu_probe", str(index)]
                            + (["--cpu"] if cpu else []), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def collect(index: int, proc: subprocess.Popen, deadline: float,
            began: float) -> ProbeResult:
    """Wait for one probe until ``deadline`` (time.monotonic), then kill it."""
    label = f"GPU {index}" if index >= 0 else "CPU"
    try:
        out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        seconds = time.monotonic() - began
        return ProbeResult(index, False, f"{label} did not finish within {seconds:.0f} s "
                           "(killed): a stuck device or driver", seconds, {})
    seconds = time.monotonic() - began
    line = next((ln[len(PREFIX):] for ln in out.splitlines() if ln.startswith(PREFIX)), None)
    if proc.returncode != 0 or line is None:
        tail = (err.strip().splitlines() or ["no output"])[-1][:200]
        return ProbeResult(index, False, f"{label} probe exited {proc.returncode}: {tail}",
                           seconds, {})
    figures = json.loads(line)
    if not figures.get("finite"):
        return ProbeResult(index, False, f"{label}: the 2048x2048 bf16 GEMM gave non-finite "
                           "or all-zero results", seconds, figures)
    return ProbeResult(index, True, f"{label}: bound in {figures['bind_s']:.2f} s, 256 MB in "
                       f"{figures['alloc_s']:.2f} s, GEMM finite", seconds, figures)


def main(argv: list[str]) -> int:
    index = int(argv[0])
    print(PREFIX + json.dumps(probe(index, "--cpu" in argv[1:])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
