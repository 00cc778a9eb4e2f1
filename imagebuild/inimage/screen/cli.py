"""``python -m imagebuild_checks screen`` (in an image; ``python -m imagebuild.inimage
screen`` from a checkout): this node's screen. Prints each item, the verdict, and one
``@@imagebuild-screen {json}`` line for ``imagebuild screen``, which runs it on every node
at once. Exit 0 when the node passes, 1 when it fails, 2 on bad input."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..doctor.before_checks import NODE_ROOT_ENV
from ..doctor.run import format_lines
from .gpu_processes import ALLOWED
from .node_screen import LINE_PREFIX, PER_GPU_TIMEOUT_S, ScreenSettings, screen_node, write_outputs


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number >= 0")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The node screen's flags; ``imagebuild screen`` forwards the same ones."""
    parser.add_argument("--cpu", action="store_true",
                        help="probe the CPU instead of the GPUs (a proxy: proves the "
                             "machinery where no GPU is)")
    parser.add_argument("--per-gpu-timeout", type=_non_negative, default=PER_GPU_TIMEOUT_S,
                        metavar="S", help="seconds each GPU's probe may take before it is "
                        f"killed and the node fails (default {PER_GPU_TIMEOUT_S:g})")
    parser.add_argument("--memlock-min-gib", type=_non_negative, default=32.0, metavar="GIB",
                        help="RLIMIT_MEMLOCK floor (default 32, 0 disables)")
    parser.add_argument("--shm-min-gib", type=_non_negative, default=8.0, metavar="GIB",
                        help="/dev/shm floor (default 8, 0 disables)")
    parser.add_argument("--smi-timeout", type=_non_negative, default=5.0, metavar="S",
                        help="seconds the SMI tool may take to answer (default 5)")
    parser.add_argument("--allow-procs", default=",".join(ALLOWED), metavar="NAMES",
                        help="process names that may hold a GPU (default: "
                             f"{','.join(ALLOWED)})")
    parser.add_argument("--allow-foreign-procs", action="store_true",
                        help="report processes holding a GPU without failing the node "
                             "(shared nodes, or a container that cannot see host PIDs)")
    parser.add_argument("--kernel-log-minutes", type=_non_negative, default=None,
                        metavar="MIN", help="scan the kernel log of the last MIN minutes "
                        "(default: since boot)")
    parser.add_argument("--expect-links", type=int, default=None, metavar="N",
                        help="fail when fewer than N Slingshot/InfiniBand ports are up")


def settings_from(args: argparse.Namespace, environ: dict[str, str]) -> ScreenSettings:
    return ScreenSettings(
        root=Path(args.root), env=environ, cpu=args.cpu,
        per_gpu_timeout_s=args.per_gpu_timeout, memlock_min_gib=args.memlock_min_gib,
        shm_min_gib=args.shm_min_gib, smi_timeout_s=args.smi_timeout,
        allowed_procs=tuple(n.strip() for n in args.allow_procs.split(",") if n.strip()),
        fail_on_procs=not args.allow_foreign_procs,
        kernel_log_minutes=args.kernel_log_minutes, expect_links=args.expect_links,
        manifest=args.manifest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagebuild screen (on one node)")
    add_arguments(parser)
    parser.add_argument("--root", default=os.environ.get(NODE_ROOT_ENV) or "/",
                        help="read the node's /sys, /proc and /dev under this directory "
                             f"(default ${NODE_ROOT_ENV}, else /)")
    parser.add_argument("--manifest", default=None, metavar="PATH",
                        help="the image's manifest, for the doctor's items (default: "
                             "/opt/imagebuild/manifest.json under the root)")
    parser.add_argument("--out-dir", default=None, metavar="DIR",
                        help="also write <node>.json and <node>.verdict there")
    args = parser.parse_args(argv)
    if not Path(args.root).is_dir():
        print(f"screen: --root {args.root}: not a directory", file=sys.stderr)
        return 2
    report = screen_node(settings_from(args, dict(os.environ)))
    from ..doctor.finding import Finding

    findings = [Finding(**f) for f in report["findings"]]
    print(f"screen: {report['node']}", file=sys.stderr)
    print("\n".join(format_lines(findings)), file=sys.stderr)
    print(f"screen: {report['node']} {report['verdict']} ({report['duration_s']:.1f} s)"
          + (": " + "; ".join(report["reasons"]) if report["reasons"] else ""),
          file=sys.stderr, flush=True)
    if args.out_dir:
        write_outputs(report, Path(args.out_dir))
    sys.stdout.write(LINE_PREFIX + json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0 if report["verdict"] == "PASS" else 1
