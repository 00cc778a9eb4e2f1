"""smi-latency: how long the GPU management tool takes to answer.

A wedging amdgpu driver typically hangs ``rocm-smi`` for 30-60 s before the GPU itself
stops responding; AMD Primus's node_smoke fails a node whose ``rocm-smi --version`` takes
longer than 5 s and flags one slower than 1 s
(https://rocm.docs.amd.com/projects/primus/en/latest/02-user-guide/node-smoke-test-instruction.html).
The first tool on PATH is timed: amd-smi, rocm-smi, then nvidia-smi (``-L`` initialises
NVML, so it waits on the driver as the others do).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping

from ..doctor.finding import Finding, failed, passed, skipped, warned

ITEM = "smi-latency"
TOOLS = (("amd-smi", ("version",)), ("rocm-smi", ("--version",)), ("nvidia-smi", ("-L",)))
TIMEOUT_S = 5.0
SLOW_S = 1.0


def check(environ: Mapping[str, str], timeout_s: float = TIMEOUT_S) -> Finding:
    path = environ.get("PATH")
    for tool, args in TOOLS:
        found = shutil.which(tool, path=path)
        if not found:
            continue
        command = f"{tool} {' '.join(args)}"
        begin = time.monotonic()
        proc = subprocess.Popen([found, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=dict(environ),
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the tool and whatever it started
            proc.communicate()
            return failed(ITEM, f"{command} did not answer within {timeout_s:g} s: the GPU "
                          "driver is wedged or about to be", "drain the node and have its "
                          "driver checked (a reboot usually clears it)")
        seconds = time.monotonic() - begin
        if proc.returncode != 0:
            last = (err or out or b"").decode(errors="replace").strip()
            return warned(ITEM, f"{command} exited {proc.returncode} after {seconds:.2f} s: "
                          f"{last.splitlines()[-1][:160] if last else 'no output'}",
                          "check the GPU driver and the tool's installation")
        if seconds > SLOW_S:
            return warned(ITEM, f"{command} took {seconds:.2f} s (over {SLOW_S:g} s: slow "
                          "answers come before a wedged driver)", "watch this node; drain "
                          "it if the next screen is slower")
        return passed(ITEM, f"{command} answered in {seconds:.2f} s")
    return skipped(ITEM, "no amd-smi, rocm-smi or nvidia-smi on PATH")
