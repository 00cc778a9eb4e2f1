"""Stand-ins for rccl-tests' *_perf binaries, for the sweep's plumbing on a CPU machine.

Each prints rows in rccl-tests' output format for the -b/-e/-f sizes it is given, with a
bus bandwidth from a fixed model of the algorithm and protocol that NCCL_ALGO and
NCCL_PROTO force: Tree/LL wins small sizes, Ring/Simple large ones, Ring/LL128 the middle.
Tree for AllGather and ReduceScatter fails as RCCL does (no such algorithm). Every call's
arguments and NCCL_* / tuner variables are appended to calls.jsonl beside the binaries.
They stand in only for the GPU run; what they feed (sweep.csv, the tuner config, the real
tuner plugin) is the project's real code.
"""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPT = r'''#!{python}
import json, os, sys
args = sys.argv[1:]
opt = dict(zip(args[::2], args[1::2]))
algo, proto = os.environ.get("NCCL_ALGO", ""), os.environ.get("NCCL_PROTO", "")
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"binary": os.path.basename(__file__), "args": args,
        "env": {{k: v for k, v in os.environ.items()
                if k.startswith(("NCCL_", "IMAGEBUILD_TUNER"))}}}}) + "\n")
name = os.path.basename(__file__)
if algo == "Tree" and name in ("all_gather_perf", "reduce_scatter_perf"):
    print("NCCL WARN Error : no algorithm/protocol available for function", file=sys.stderr)
    sys.exit(3)
latency = {{"LL": 5.0, "LL128": 9.0, "Simple": 30.0}}[proto] * (0.7 if algo == "Tree" else 1.0)
peak = {{"LL": 20.0, "LL128": 120.0, "Simple": 160.0}}[proto] * (0.8 if algo == "Tree" else 1.0)
print("#       size         count      type   redop    root     time   algbw   busbw #wrong"
      "     time   algbw   busbw #wrong")
size, end, factor = int(opt["-b"]), int(opt["-e"]), int(opt["-f"])
while size <= end:
    us = latency + size / (peak * 1e3)
    busbw = size / us / 1e3
    print(f"{{size:12d}} {{size // 4:12d}}     float     sum      -1 {{us:8.2f}} "
          f"{{busbw:7.2f}} {{busbw:7.2f}}      0 {{us:8.2f}} {{busbw:7.2f}} {{busbw:7.2f}}      0")
    size *= factor
'''

NAMES = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "broadcast_perf",
         "reduce_perf")


def write_standins(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        path = directory / name
        path.write_text(SCRIPT.format(python=sys.executable))
        path.chmod(0o755)
    return directory
