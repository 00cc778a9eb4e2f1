#!/usr/bin/env python3
"""Squash speed and size: ``imagebuild squash`` as users run it, against enroot's method,
side by side on the same image, disk and machine; where each second goes; and (--table)
the compression trade-off: squash time, size and read time per zstd level and block size.

Images (``--images``, default both):

- ``demo``: the CPU demo recipe's image (``imagebuild/cpu-demo:latest``, as scripts/demo
  builds it: Debian bookworm + a venv with the CPU torch wheel, 27,000 files), built here
  first when missing.
- ``libs``: made like a ROCm image (few, large shared libraries): Debian minbase + the CPU
  torch wheel unpacked into site-packages, one ``docker import``-ed layer
  (``imagebuild-bench/torch:latest``).

Methods, run in interleaved rounds (A B C A B C ...) so a change in the machine's load hits
all of them alike; best and median of the rounds are printed:

- ``imagebuild squash IMAGE --formats sqsh`` in a new process, as users run it (interpreter
  start, imports, engine calls, the read from the engine's storage, filter, tar2sqfs, sha256,
  fsync and the rename all counted);
- the same with ``--read export`` (``docker export``): shows what reading storage saves, and
  must give the same bytes;
- ``buildkit-tar`` (not in the default set): BuildKit's ``--output type=tar`` of a build
  that is only ``FROM IMAGE``, through the same filter into tar2sqfs: what squashing
  straight from a build's output, without the image in the engine, would cost;
- enroot's method, as ``enroot import dockerd://IMAGE`` runs it (enroot 4.1.2
  src/docker.sh): ``docker export | tar -px`` into a directory, ``chmod -R u+rX`` and the
  directory fix-up (common::fixperms), then ``mksquashfs DIR x.sqsh -all-root -comp lzo
  -noD`` (ENROOT_SQUASH_OPTIONS' default), with as many processors as this machine has.

Where the seconds go: imagebuild's own breakdown (``--timings``: setup, the stream with the
CPU seconds of its reader, filter and compressor, sha256+fsync+rename) plus the process's
start-up (wall minus that total) and, for the export, dockerd's CPU seconds (/proc); for
enroot, each of its steps.

--table: ``squash_image`` from the engine's storage for each setting of ``--grid``; read
time three ways: ``sqfs2tar`` of the whole image to /dev/null (user space, warm), and,
where this runs as root with loop devices, the image mounted by the kernel after dropping
the page cache: every file read (``tar -c``), and ``python -c 'import torch'`` in a chroot
(an image with /opt/venv, as the demo's: the read pattern of a job's start).

Every run writes its record (bench_record.py): the figures, the machine (CPU model, cores,
load average before and after, memory), the tools' versions and the command, to
benchmarks/results/squash/comparison.{json,txt} (``--table``: compression-table.{json,txt};
``--record PATH`` elsewhere). Commit them: docs/runtimes.md quotes them. Run it on a quiet
machine: the ratio follows the load and enroot's disk path.

Usage: python benchmarks/squash_bench.py [--images demo,libs] [--repeat 3] [--workdir DIR]
       python benchmarks/squash_bench.py --table [--images libs] [--grid zstd:1,zstd:3/1M]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench_images import DOCKER, MAKERS, ROOT, content_of, docker_source
from bench_record import RESULTS, Recording
from squash_table import DEFAULT_GRID, table

from imagebuild.convert.squashfs import find_squash_tool, squash_image
from imagebuild.convert.timings import children_cpu

#: Where a run's record goes (``--record``): committed, so the docs' figures trace to it.
RECORD = RESULTS / "squash" / "comparison"
TABLE_RECORD = RESULTS / "squash" / "compression-table"
TOOLS = ("tar2sqfs", "mksquashfs", "sqfs2tar", "tar", "docker")


# --- methods ----------------------------------------------------------------------------------

@dataclass
class Run:
    seconds: float
    size: int
    sha256: str = ""
    #: where the seconds went, part -> seconds
    parts: dict[str, float] = field(default_factory=dict)
    note: str = ""


def dockerd_cpu() -> float:
    """dockerd's user + system seconds so far (/proc/PID/stat fields 14 and 15)."""
    pid = subprocess.run(["pgrep", "-xo", "dockerd"], capture_output=True, text=True,
                         check=False).stdout.strip()
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_TIMINGS = re.compile(
    r"time (?P<total>[\d.]+) s: setup (?P<setup>[\d.]+) s, stream (?P<stream>[\d.]+) s "
    r"\(CPU: read (?P<read>[\d.]+) s, filter (?P<filter>[\d.]+) s, compress "
    r"(?P<compress>[\d.]+) s on (?P<jobs>\d+) jobs\), sha256\+fsync\+rename "
    r"(?P<publish>[\d.]+) s; read: (?P<read_by>.*)$", re.MULTILINE)


def run_cli(image: str, out: Path, *extra: str) -> Run:
    """``imagebuild squash IMAGE --formats sqsh`` in a new process, as users run it."""
    target = out / "cli"
    engine_before = dockerd_cpu()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "imagebuild", "squash", image, "--formats",
                           "sqsh", "--timings", "--output-dir", str(target), *extra],
                          check=True, capture_output=True, text=True, cwd=ROOT)
    seconds = time.monotonic() - started
    engine = dockerd_cpu() - engine_before
    sqsh = next(target.glob("*.sqsh"))
    run = Run(seconds, sqsh.stat().st_size,
              (sqsh.parent / f"{sqsh.name}.sha256").read_text().split()[0])
    match = _TIMINGS.search(done.stdout)
    if match:
        part = {k: float(v) for k, v in match.groupdict().items() if k != "read_by"}
        run.parts = {"start-up (interpreter, imports)": seconds - part["total"],
                     "setup (image, container, mount)": part["setup"],
                     "stream (read | filter | tar2sqfs)": part["stream"],
                     "  CPU: reader": part["read"],
                     "  CPU: tar filter": part["filter"],
                     f"  CPU: tar2sqfs, {int(part['jobs'])} jobs": part["compress"],
                     "  CPU: dockerd": engine,
                     "sha256 + fsync + rename": part["publish"]}
        run.note = f"read: {match.group('read_by')}"
    shutil.rmtree(target)
    return run


def run_enroot(image: str, out: Path) -> Run:
    """``enroot import dockerd://IMAGE`` as enroot 4.1.2 does it (src/docker.sh)."""
    name = f"bench-enroot-{os.getpid()}"
    rootfs = out / "enroot-rootfs"
    target = out / "enroot.sqsh"
    parts: dict[str, float] = {}
    started = time.monotonic()
    subprocess.run([DOCKER, "create", "--name", name, image, "/x"], check=True,
                   stdout=subprocess.DEVNULL)
    try:
        rootfs.mkdir()
        step = time.monotonic()
        export = subprocess.Popen([DOCKER, "export", name], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-C", str(rootfs), "--warning=no-timestamp", "--anchored",
                        "--exclude=dev/*", "--exclude=.dockerenv", "-px"],
                       stdin=export.stdout, check=True)
        export.wait()
        parts["docker export | tar -px"] = time.monotonic() - step
        step = time.monotonic()
        subprocess.run(["chmod", "-f", "-R", "u+rX", str(rootfs)], check=False)
        subprocess.run(["find", str(rootfs), "-maxdepth", "15", "-type", "d", "!", "-perm",
                        "-u=w", "-exec", "chmod", "-f", "u+w", "{}", "+"], check=False)
        parts["fixperms (chmod -R, find)"] = time.monotonic() - step
        step, cpu = time.monotonic(), children_cpu()
        subprocess.run(["mksquashfs", str(rootfs), str(target), "-all-root", "-no-progress",
                        "-processors", str(os.cpu_count() or 1), "-comp", "lzo", "-noD"],
                       check=True, stdout=subprocess.DEVNULL)
        parts["mksquashfs -comp lzo -noD"] = time.monotonic() - step
        parts["  CPU: mksquashfs"] = children_cpu() - cpu
        seconds = time.monotonic() - started
    finally:
        subprocess.run([DOCKER, "rm", "-f", name], capture_output=True, check=False)
        shutil.rmtree(rootfs, ignore_errors=True)
    size = target.stat().st_size
    target.unlink()
    return Run(seconds, size, parts=parts)


class BuildOutputSource:
    """The image's filesystem as BuildKit's tar exporter writes it (``docker build --output
    type=tar,dest=-`` of a Dockerfile that is only ``FROM IMAGE``): the path a build could
    squash from without loading the image into the engine. Measured for comparison only."""

    read_by = "BuildKit --output type=tar"

    def __init__(self, image: str, work: Path):
        self.image, self.description = image, image
        self.context = work / "buildkit-context"
        self.context.mkdir(exist_ok=True)
        (self.context / "Dockerfile").write_text(f"FROM {image}\n")

    def config(self):  # type: ignore[no-untyped-def]
        return docker_source(self.image).config()

    @contextmanager
    def rootfs_tar(self) -> Iterator:
        build = subprocess.Popen([DOCKER, "build", "--network", "host", "--output",
                                  "type=tar,dest=-", str(self.context)],
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 env={**os.environ, "DOCKER_BUILDKIT": "1"}, bufsize=0)
        try:
            yield build.stdout
        finally:
            build.kill()
            build.wait()


def run_buildkit_output(image: str, out: Path) -> Run:
    """BuildKit's tar output through the same filter into tar2sqfs (in this process)."""
    target = out / "buildkit.sqsh"
    started = time.monotonic()
    result = squash_image(BuildOutputSource(image, out), target,
                          tool=find_squash_tool("tar2sqfs"))
    run = Run(time.monotonic() - started, result.artifact.size, result.artifact.sha256)
    if result.timings is not None:
        run.parts = {"stream (docker build --output | filter | tar2sqfs)":
                     result.timings.stream_s,
                     "  CPU: docker client (the tar's receiver)": result.timings.reader_cpu_s,
                     "  CPU: tar filter": result.timings.filter_cpu_s,
                     "  CPU: tar2sqfs": result.timings.tool_cpu_s}
    target.unlink()
    target.with_name(target.name + ".sha256").unlink(missing_ok=True)
    return run


METHODS: dict[str, tuple[str, Callable[[str, Path], Run]]] = {
    "cli": ("imagebuild squash (CLI)", lambda image, out: run_cli(image, out)),
    "cli-export": ("imagebuild squash --read export",
                   lambda image, out: run_cli(image, out, "--read", "export")),
    "enroot": ("enroot's method", run_enroot),
    "buildkit-tar": ("BuildKit tar output (no load)", run_buildkit_output),
}


@dataclass
class Result:
    method: str
    runs: list[Run]

    @property
    def best(self) -> Run:
        return min(self.runs, key=lambda run: run.seconds)

    @property
    def median_s(self) -> float:
        return statistics.median(run.seconds for run in self.runs)

    @property
    def median_run(self) -> Run:
        ordered = sorted(self.runs, key=lambda run: run.seconds)
        return ordered[(len(ordered) - 1) // 2]


def compare(image: str, work: Path, methods: list[str], rounds: int) -> dict[str, Any]:
    """Run ``methods`` on ``image`` in interleaved rounds; print the comparison and return it
    as data for the record."""
    size, members = content_of(image)
    mib = size / (1 << 20)
    print(f"\n== {image}: {mib:.0f} MiB of file content in {members:,} members; "
          f"{os.cpu_count()} CPUs; {rounds} rounds, methods interleaved", flush=True)
    results = {m: Result(METHODS[m][0], []) for m in methods}
    for index in range(rounds):
        for method in methods:
            run = METHODS[method][1](image, work)
            results[method].runs.append(run)
            print(f"   round {index + 1}: {METHODS[method][0]:32} {run.seconds:6.1f} s", flush=True)
    print(f"   {'method':34} {'best s':>7} {'median s':>9} {'MiB':>7} {'in MiB/s':>9}")
    for result in results.values():
        best = result.best
        print(f"   {result.method:34} {best.seconds:7.1f} {result.median_s:9.1f} "
              f"{best.size / (1 << 20):7.0f} {mib / best.seconds:9.0f}")
    data: dict[str, Any] = {
        "image": image, "content_mib": round(mib, 1), "members": members, "rounds": rounds,
        "methods": {m: {"label": r.method, "best_s": round(r.best.seconds, 3),
                        "median_s": round(r.median_s, 3),
                        "size_mib": round(r.best.size / (1 << 20), 1),
                        "runs": [asdict(run) for run in r.runs]}
                    for m, r in results.items()}}
    if "cli" in results and "enroot" in results:
        cli, enroot = results["cli"], results["enroot"]
        data["against_enroot"] = {
            "faster_best": round(enroot.best.seconds / cli.best.seconds, 2),
            "faster_median": round(enroot.median_s / cli.median_s, 2),
            "size_percent": round(100 * cli.best.size / enroot.best.size, 1)}
        print(f"   => imagebuild squash: {enroot.best.seconds / cli.best.seconds:.1f}x faster "
              f"than enroot's method (best of {rounds}; "
              f"{enroot.median_s / cli.median_s:.1f}x by medians), "
              f"{100 * cli.best.size / enroot.best.size:.1f} % of its size")
    if "cli" in results and "cli-export" in results:
        same = {run.sha256 for r in ("cli", "cli-export") for run in results[r].runs}
        print(f"   => storage read vs docker export: "
              f"{results['cli-export'].median_s / results['cli'].median_s:.2f}x by medians; "
              f"same squashfs bytes in every run: {'yes' if len(same) == 1 else 'NO'}")
    if "cli" in results and "buildkit-tar" in results:
        same = {run.sha256 for r in ("cli", "buildkit-tar") for run in results[r].runs}
        print(f"   => BuildKit tar output vs storage read: "
              f"{results['buildkit-tar'].median_s / results['cli'].median_s:.2f}x the time by "
              f"medians; same squashfs bytes: {'yes' if len(same) == 1 else 'no'}")
    print("   where the seconds go (each method's median run):")
    for result in results.values():
        run = result.median_run
        print(f"     {result.method} ({run.seconds:.1f} s{', ' + run.note if run.note else ''}):")
        for part, seconds in run.parts.items():
            print(f"       {part:36} {seconds:6.2f} s")
    return data


def against_enroot(record: dict[str, Any]) -> str | None:
    """The sentence the docs quote from a comparison record: the range over its images of
    how much faster ``imagebuild squash`` was than enroot's method (best of the rounds and
    by medians) and its size as a share of enroot's; None when no image ran both."""
    figures = [image["against_enroot"] for image in record.get("images", [])
               if "against_enroot" in image]
    if not figures:
        return None

    def span(key: str, unit: str, digits: int) -> str:
        low, high = (f"{f(x[key] for x in figures):.{digits}f}" for f in (min, max))
        return f"{low}{unit}" if low == high else f"{low} to {high}{unit}"

    rounds = {image["rounds"] for image in record["images"]}
    return (f"{span('faster_best', 'x', 1)} faster than enroot's method (best of "
            f"{'/'.join(map(str, sorted(rounds)))}; {span('faster_median', 'x', 1)} by "
            f"medians) at {span('size_percent', ' %', 0)} of its size, on "
            f"{len(figures)} image(s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", default="demo,libs",
                        help="demo, libs or image references, comma-separated (default: both)")
    parser.add_argument("--methods", default="cli,cli-export,enroot",
                        help=f"of {', '.join(METHODS)} (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default: 3)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()),
                        help="an existing directory where outputs go, the same disk for "
                             "every method (default: the system's temporary directory)")
    parser.add_argument("--table", action="store_true",
                        help="the compression trade-off instead of the comparison")
    parser.add_argument("--grid", default=DEFAULT_GRID,
                        help=f"settings for --table (default: {DEFAULT_GRID})")
    parser.add_argument("--record", type=Path, default=None,
                        help="write the figures, the machine and the command to RECORD.json "
                             "and RECORD.txt (default: benchmarks/results/squash/comparison, "
                             "or compression-table with --table; commit them)")
    args = parser.parse_args()
    if not args.workdir.is_dir():
        parser.error(f"--workdir {args.workdir}: no such directory (create it first; it "
                     "should be on the disk the squashed images are meant for)")
    unknown = [m for m in args.methods.split(",") if m not in METHODS]
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; choose from "
                     f"{', '.join(METHODS)}")

    record_path = args.record or (TABLE_RECORD if args.table else RECORD)
    with Recording(record_path, "squash_bench --table" if args.table else "squash_bench",
                   tools=TOOLS) as record:
        work = Path(tempfile.mkdtemp(dir=args.workdir, prefix="squash-bench-"))
        measured: list[dict[str, Any]] = []
        try:
            images = [MAKERS[name](work) if name in MAKERS else name
                      for name in args.images.split(",")]
            for image in images:
                measured.append(table(image, work, args.grid, args.repeat) if args.table
                                else compare(image, work, args.methods.split(","),
                                             args.repeat))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        record.data["images"] = measured
        if not args.table and (sentence := against_enroot(record.data)) is not None:
            record.data["against_enroot"] = sentence
            print(f"\n== imagebuild squash (CLI): {sentence}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
