"""The one-node SLURM cluster .ci/setup-system.sh starts: is it there?"""

from __future__ import annotations

import shutil
import subprocess


def cluster_up() -> str | None:
    """None when a node answers in an up state, else why not."""
    for tool in ("sbatch", "sinfo", "scontrol", "srun"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (.ci/setup-system.sh installs SLURM)"
    probe = subprocess.run(["sinfo", "--noheader", "--format=%t"], capture_output=True,
                           text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return f"sinfo failed: {probe.stderr.strip() or probe.returncode}"
    states = probe.stdout.split()
    if not any(s in ("idle", "mix", "alloc") for s in states):  # "idle*": not responding
        return f"no SLURM node is up (states: {', '.join(states) or 'none'})"
    return None
