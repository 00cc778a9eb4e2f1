"""Stand-ins for rccl-tests' *_perf binaries, for the sweep's plumbing on a CPU machine.

Each prints rows in rccl-tests' output format for the -b/-e/-f sizes it is given, with a
bus bandwidth from a fixed model of the algorithm and protocol that NCCL_ALGO and
NCCL_PROTO force: Tree/LL wins small sizes, Ring/Simple large ones, Ring/LL128 the middle.
Tree for AllGather and ReduceScatter fails as RCCL does (no such algorithm); with neither
variable forced (or an exclusion such as ``^LL128``) it models Ring/Simple. The busbw column
is the model's figure and algbw is derived from it by nccl-tests' factors for the -g ranks
(doc/PERFORMANCE.md: busbw = algbw * 2(n-1)/n for all-reduce, (n-1)/n for the others), so a
reader of the wrong column gets another number. Two variables make a run misbehave on
purpose: ``STANDIN_LAST_ROW_SCALE=F`` multiplies the largest size's bandwidth by F, and
``STANDIN_WRONG=N`` reports N wrong values at the largest size. Every call's
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
table = {{"LL": (5.0, 20.0), "LL128": (9.0, 120.0), "Simple": (30.0, 160.0)}}
latency, peak = table.get(proto, table["Simple"])
latency, peak = (latency * 0.7, peak * 0.8) if algo == "Tree" else (latency, peak)
ranks = int(opt.get("-g", "1"))
factor_bus = (2.0 if name == "all_reduce_perf" else 1.0) * (ranks - 1) / ranks if ranks > 1 else 1.0
print("#       size         count      type   redop    root     time   algbw   busbw #wrong"
      "     time   algbw   busbw #wrong")
size, end, factor = int(opt["-b"]), int(opt["-e"]), int(opt["-f"])
while size <= end:
    last = size * factor > end
    us = latency + size / (peak * 1e3)
    busbw = size / us / 1e3 * (float(os.environ.get("STANDIN_LAST_ROW_SCALE", "1")) if last else 1.0)
    algbw = busbw / factor_bus
    wrong = int(os.environ.get("STANDIN_WRONG", "0")) if last else 0
    print(f"{{size:12d}} {{size // 4:12d}}     float     sum      -1 {{us:8.2f}} "
          f"{{algbw:7.2f}} {{busbw:7.2f}} {{wrong:6d}} {{us:8.2f}} {{algbw:7.2f}} {{busbw:7.2f}}      0")
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
