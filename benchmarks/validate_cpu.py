#!/usr/bin/env python3
"""Wall time of the CPU-mode validation suite, the run CI does in every image.

Runs ``python -m imagebuild.inimage --allow-cpu`` (two gloo ranks spawned by the
runner, the reduced Llama train step) ``--repeat`` times and prints the total wall time
and each check's duration from the reports, plus the train step's throughput.

Usage: python benchmarks/validate_cpu.py [--repeat N] [-- extra runner flags]

Measured on the project's dev VM (2 vCPUs shared with other jobs), torch 2.13.0+cpu,
3 runs: wall median 4.6 s (4.3-6.1), of which train 1.3 s (2 layers, seq 256, 4 timed
steps, about 2,900 tokens/s per rank) and collectives 0.3 s; the rest is starting two
Python processes with torch and the gloo rendezvous.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("extra", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    extra = [a for a in args.extra if a != "--"]
    walls: list[float] = []
    per_check: dict[str, list[float]] = {}
    tokens: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            report = Path(tmp) / f"r{i}.json"
            begin = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "imagebuild.inimage", "--allow-cpu",
                 "--report", str(report), *extra], cwd=tmp, capture_output=True, text=True,
                check=False, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
            walls.append(time.perf_counter() - begin)
            if proc.returncode != 0:
                print(proc.stdout, proc.stderr, file=sys.stderr)
                return proc.returncode
            data = json.loads(report.read_text())
            for check in data["checks"]:
                per_check.setdefault(check["name"], []).append(check["duration_s"])
                if check["name"] == "train" and check["status"] == "passed":
                    tokens.append(check["figures"]["tokens_per_s_per_gpu"])
    print(f"runs: {args.repeat}; wall s: median {statistics.median(walls):.2f} "
          f"(min {min(walls):.2f}, max {max(walls):.2f})")
    for name, values in per_check.items():
        print(f"  {name:<12} median {statistics.median(values):6.2f} s")
    if tokens:
        print(f"  train tokens/s/rank: median {statistics.median(tokens):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
