"""A rank that raises out of a check must not leave the others reading its data: the tagged
exchange fails on both sides, and the results exchange lines the ranks up again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from imagebuild.inimage.job_rank import free_port

SCRIPT = r'''
import json, os, sys
import torch, torch.distributed as dist
from imagebuild.inimage.check_context import Context, RanksOutOfStep
from imagebuild.inimage.job_rank import Launch
from imagebuild.inimage.options import parse
from imagebuild.inimage.result import failed, passed
from imagebuild.inimage.check_runner import _gather_results

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
ctx = Context(options=parse([]), launch=Launch(rank, 2, rank, "127.0.0.1", 0, "test"),
              mode="cpu", device=torch.device("cpu"), backend="gloo", gpu_data={},
              workdir=None, hosts=["h", "h"])
events = []
if rank == 0:
    try:
        ctx.agree(True)            # rank 1 has already left the check
        result = passed("collectives", "unreachable")
    except RanksOutOfStep as exc:
        events.append(str(exc))
        result = failed("collectives", f"error: {exc}")
else:
    result = failed("collectives", "error: raised before agreeing")
gathered = _gather_results(ctx, "collectives", result)
events.append([g["status"] for g in gathered])
events.append(ctx.all_gather_object(rank, tag="next"))  # in step again
print(json.dumps(events))
dist.destroy_process_group()
'''


def test_stray_exchange_fails_and_ranks_line_up_again(tmp_path: Path) -> None:
    script = tmp_path / "step.py"
    script.write_text(SCRIPT)
    port = str(free_port())
    repo = str(Path(__file__).resolve().parents[2])
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(os.environ, RANK=str(r), MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=port, PYTHONPATH=repo))
             for r in (0, 1)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    rank0, rank1 = (json.loads(out.strip().splitlines()[-1]) for out, _ in outputs)
    assert "ranks out of step: rank 0 at 'agree', rank 1 at 'result:collectives'" in rank0[0]
    assert rank0[1:] == rank1 == [["failed", "failed"], [0, 1]]
