"""``imagebuild screen``: screen every node of a job in parallel, before it burns
allocation: the doctor's items where the image is known, the host (locked-memory limit,
/dev/shm, GPU errors in the kernel log, processes already on a GPU, SMI latency,
Slingshot/InfiniBand links) and a Tier-1 probe of each GPU (bind, 256 MB, a bf16 GEMM
checked finite, killed at a hard timeout). Each node reports PASS or FAIL with its
reasons; the fleet's report, failing_nodes.txt and ``exclude`` (the failing nodes on one
line: sbatch --exclude="$(cat DIR/exclude)") go to --out.

Inside an allocation it screens the allocation's nodes; from a login node srun makes an
allocation of --nodes; --local screens this node only.
Exit codes: 0 every node passed, 1 a node failed or did not report, 2 bad input or
nothing could be launched.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import shutil
import time
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.screen.cli import add_arguments as add_node_arguments


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "screen", help="screen every node of a job in parallel: PASS/FAIL per node and an "
        "exclude list for srun/sbatch --exclude", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", default=None,
                        help="a .sif to run the screen in (default: this Python environment, "
                             "or --environment)")
    parser.add_argument("--local", action="store_true", help="screen this node only, no SLURM")
    parser.add_argument("--environment", default=None, metavar="EDF",
                        help="Container Engine environment (srun --environment=EDF)")
    parser.add_argument("--python", default=None, help="the Python that runs the screen "
                        "(default: this one; python3 in an image)")
    parser.add_argument("--nodes", type=int, default=None,
                        help="nodes to screen (default: the allocation's; from a login node 1)")
    parser.add_argument("--nodelist", default=None, metavar="LIST",
                        help="these nodes (SLURM's syntax, e.g. nid[001-004])")
    parser.add_argument("--partition", default=None, help="SLURM partition (login node)")
    parser.add_argument("--account", default=None, help="SLURM account (login node)")
    parser.add_argument("--time", default="00:05:00", help="allocation time (login node)")
    parser.add_argument("--gpus-per-node", type=int, default=None,
                        help="GPUs each node's screen gets (srun --gpus-per-node)")
    parser.add_argument("--deadline", type=float, default=None, metavar="S",
                        help="seconds until srun is stopped and every node that has not "
                             "reported fails (default: the per-GPU timeout + 60; from a "
                             "login node + 600 for the queue)")
    parser.add_argument("--root", default=None, metavar="DIR",
                        help="the nodes read /sys, /proc and /dev under DIR (a node tree: "
                             "tests, or a copy of a node's)")
    parser.add_argument("--manifest", default=None, metavar="PATH",
                        help="the image's manifest for the doctor's items, when the screen "
                             "does not run in the image")
    parser.add_argument("--out", default=None, metavar="DIR",
                        help="where the reports go (default reports/screen-<UTC time>)")
    add_node_arguments(parser)
    parser.set_defaults(func=run)


def node_args(args: argparse.Namespace) -> list[str]:
    words = [f"--per-gpu-timeout={args.per_gpu_timeout:g}",
             f"--memlock-min-gib={args.memlock_min_gib:g}", f"--shm-min-gib={args.shm_min_gib:g}",
             f"--smi-timeout={args.smi_timeout:g}", f"--allow-procs={args.allow_procs}"]
    words += ["--cpu"] if args.cpu else []
    words += ["--allow-foreign-procs"] if args.allow_foreign_procs else []
    if args.kernel_log_minutes is not None:
        words.append(f"--kernel-log-minutes={args.kernel_log_minutes:g}")
    if args.expect_links is not None:
        words.append(f"--expect-links={args.expect_links}")
    if args.root:
        words.append(f"--root={Path(args.root).resolve()}")
    if args.manifest:
        words.append(f"--manifest={Path(args.manifest).resolve()}")
    return words


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from imagebuild.validate import fleet_screen
    from imagebuild.validate.screen_launch import (
        ScreenLaunch,
        expected_nodes,
        in_allocation,
        log_tail,
    )
    from imagebuild.validate.screen_launch import run as launch_run

    environ = dict(os.environ)
    if args.target and not args.target.endswith(".sif"):
        raise ValidateError(f"screen {args.target}: expected a .sif file (or --environment "
                            "EDF for the Container Engine)")
    if args.local and (args.nodes or args.nodelist):
        raise ValidateError("--local screens this node only; drop --nodes/--nodelist")
    launcher = "local" if args.local else "srun"
    if launcher == "srun" and shutil.which("srun") is None:
        raise ValidateError("screen: srun is not on PATH", hint="run it on a SLURM login "
                            "node or in an allocation, or --local for this node only")
    if args.root and not Path(args.root).is_dir():
        raise ValidateError(f"screen --root {args.root}: not a directory")
    inside = in_allocation(environ)
    deadline = args.deadline or (args.per_gpu_timeout + 60
                                 + (600 if launcher == "srun" and not inside else 0))
    launch = ScreenLaunch(launcher=launcher, node_args=tuple(node_args(args)),
                          environment=args.environment, sif=args.target, python=args.python,
                          nodes=args.nodes or (None if inside or args.nodelist else 1),
                          nodelist=args.nodelist, partition=args.partition,
                          account=args.account, time=args.time,
                          gpus_per_node=args.gpus_per_node, deadline_s=deadline)
    started = _dt.datetime.now(_dt.UTC)
    out = Path(args.out or f"reports/screen-{started.strftime('%Y%m%dT%H%M%SZ')}")
    expected = [] if launcher == "local" else expected_nodes(launch, environ)
    console = Console()
    begin = time.monotonic()
    collected = launch_run(launch, out, environ)
    seconds = time.monotonic() - begin
    if not collected.reports and not expected:
        tail = "\n".join(log_tail(collected.log))
        raise ValidateError(f"screen: no node reported ({' '.join(collected.command[:6])} "
                            f"... exit {collected.exit_code}"
                            + (f", stopped after {deadline:g} s" if collected.timed_out else "")
                            + f"); last output:\n{tail}", hint=f"the full log: {collected.log}")
    if not expected:  # srun made the allocation: the nodes say which nodes it had
        listed = next((r.get("job_nodes") for r in collected.reports if r.get("job_nodes")), None)
        expected = [] if launcher == "local" or not listed else _expand(listed)
    why = (f"stopped after {deadline:g} s (--deadline)" if collected.timed_out else
           f"the node's screen did not run or died (srun exit {collected.exit_code}; "
           f"see {collected.log})")
    fleet = fleet_screen.aggregate(collected.reports, expected, why, started, seconds,
                                   {"launcher": launcher, "command": collected.command})
    path = fleet_screen.write(fleet, out)
    print_fleet(console, fleet)
    console.print(f"report: {path}; the job takes: --exclude=\"$(cat {out / 'exclude'})\"",
                  highlight=False, soft_wrap=True)
    return 0 if not fleet["failing"] else 1


def _expand(nodelist: str) -> list[str]:
    from imagebuild.inimage.job_rank import expand_nodelist

    return expand_nodelist(nodelist)


def print_fleet(console: Any, fleet: dict[str, Any]) -> None:
    from rich.markup import escape

    for row in fleet["nodes"]:
        colour = "green" if row["verdict"] == "PASS" else "red"
        took = f"{row['duration_s']:.1f}s" if row["duration_s"] is not None else "-"
        console.print(f"[{colour}]{row['verdict']}[/{colour}]  {escape(row['node'])}  {took}"
                      + (f"  {escape('; '.join(row['reasons']))}" if row["reasons"] else ""),
                      highlight=False, soft_wrap=True)
    for item in fleet["drift"]:
        console.print(f"[yellow]drift[/yellow]  {escape(item['node'])}: {item['key']} "
                      f"{escape(str(item['value']))}, the fleet's majority "
                      f"{escape(str(item['majority']))}", highlight=False, soft_wrap=True)
    spread = fleet["per_node_s"]
    console.print(f"screen: {len(fleet['passing'])} passed, {len(fleet['failing'])} failed "
                  f"of {len(fleet['nodes'])} node(s) in {fleet['duration_s']:.1f} s"
                  + (f" (per node {spread['min']:.1f}-{spread['max']:.1f} s)" if spread else "")
                  + (f"; exclude: {fleet['exclude']}" if fleet["exclude"] else ""),
                  highlight=False, soft_wrap=True)
