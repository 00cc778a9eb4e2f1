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
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from imagebuild.convert.sources import ImageSource
from imagebuild.convert.squashfs import (
    Compression,
    find_squash_tool,
    parse_size,
    squash_image,
)
from imagebuild.convert.timings import children_cpu
from imagebuild.engine.select import open_engine

LIBS_IMAGE = "imagebuild-bench/torch:latest"
DEFAULT_GRID = "zstd:1,zstd:2,zstd:3,zstd:5,zstd:9,zstd:3/256K,zstd:3/1M,lz4,gzip:6"
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"


# --- images -----------------------------------------------------------------------------------

def docker_source(image: str) -> ImageSource:
    """``image`` in the Docker engine, read as ``imagebuild squash --backend docker`` reads it."""
    return open_engine("docker", for_build=False).image_source(image)


def image_exists(ref: str) -> bool:
    return subprocess.run([DOCKER, "image", "inspect", ref], capture_output=True,
                          check=False).returncode == 0


def make_libs_image(work: Path) -> str:
    """Debian minbase (the test base's cached debootstrap) + the CPU torch wheel unpacked in
    site-packages, imported as one layer."""
    if image_exists(LIBS_IMAGE):
        return LIBS_IMAGE
    from testbed.base_images import base_rootfs_tarball
    from testbed.cpu_recipe import torch_wheel

    wheel = next(Path("/opt/wheels").glob("torch-*cp311*.whl"), None) or torch_wheel()
    print(f"making {LIBS_IMAGE}: Debian minbase + {wheel.name} ...", flush=True)
    rootfs = work / "libs-rootfs"
    rootfs.mkdir()
    subprocess.run(["tar", "-C", str(rootfs), "-xpf", str(base_rootfs_tarball())], check=True)
    site = rootfs / "usr/local/lib/python3.11/dist-packages"
    site.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                           stdout=subprocess.PIPE)
    subprocess.run([DOCKER, "import", "-c", ("ENV PATH=/usr/local/sbin:/usr/local/bin:"
                    "/usr/sbin:/usr/bin:/sbin:/bin"), "-c", "WORKDIR /workspace",
                    "-c", 'CMD ["/bin/bash"]', "-", LIBS_IMAGE],
                   stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)
    return LIBS_IMAGE


def make_demo_image(work: Path) -> str:
    """The demo recipe locked and built as scripts/demo does (without squash/validate)."""
    from testbed.cpu_recipe import DEMO_IMAGE, DEMO_RECIPE, demo_project

    if image_exists(DEMO_IMAGE):
        return DEMO_IMAGE
    from imagebuild.cli import main
    from testbed.wheel_index import IndexServer

    print(f"making {DEMO_IMAGE}: lock and build the demo recipe ...", flush=True)
    project = work / "demo-project"
    index = demo_project(project)
    saved = dict(os.environ)
    os.environ["IMAGEBUILD_PROJECT"] = str(project)
    if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        os.environ.setdefault("IMAGEBUILD_SITE_CA", "/etc/ssl/certs/ca-certificates.crt")
    try:
        with IndexServer(index) as server:
            for argv in (["lock", DEMO_RECIPE, "--index-url", server.url_for("cpu/")],
                         ["build", DEMO_RECIPE]):
                if main(argv) != 0:
                    raise SystemExit(f"imagebuild {' '.join(argv)} failed")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return DEMO_IMAGE


def content_of(image: str) -> tuple[int, int]:
    """(file bytes, members) of the image's filesystem."""
    size = members = 0
    with docker_source(image).rootfs_tar() as stream, \
            tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            members += 1
            size += member.size if member.isreg() else 0
    return size, members


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


def compare(image: str, work: Path, methods: list[str], rounds: int) -> dict[str, Result]:
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
    if "cli" in results and "enroot" in results:
        cli, enroot = results["cli"], results["enroot"]
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
    return results


# --- the compression table --------------------------------------------------------------------

def parse_setting(text: str) -> Compression:
    """``zstd:3``, ``zstd:3/1M``, ``lz4`` -> Compression."""
    spec, _, block = text.partition("/")
    algorithm, _, level = spec.partition(":")
    return Compression(algorithm, int(level) if level else None,
                       parse_size(block) if block else 128 << 10)


def can_mount() -> bool:
    return os.geteuid() == 0 and Path("/dev/loop-control").exists() and \
        "squashfs" in Path("/proc/filesystems").read_text()


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


@contextmanager
def mounted(sqsh: Path, where: Path) -> Iterator[Path]:
    where.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "squashfs", "-o", "loop,ro", str(sqsh), str(where)],
                   check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)


def chrooted(root: Path, *argv: str) -> None:
    """Run ``argv`` in ``root`` with the host's /dev and a /proc (torch reads /dev/urandom)."""
    mounts = [(["mount", "--bind", "/dev", str(root / "dev")], root / "dev"),
              (["mount", "-t", "proc", "proc", str(root / "proc")], root / "proc")]
    done = []
    try:
        for command, point in mounts:
            subprocess.run(command, check=True)
            done.append(point)
        subprocess.run([shutil.which("chroot") or "/usr/sbin/chroot", str(root), *argv],
                       check=True, capture_output=True, env={"PATH": "/usr/bin:/bin"})
    finally:
        for point in reversed(done):
            subprocess.run(["umount", str(point)], check=False)


def timed(action: Callable[[], object]) -> float:
    started = time.monotonic()
    action()
    return time.monotonic() - started


def read_times(sqsh: Path, work: Path) -> tuple[float, float | None, float | None]:
    """(sqfs2tar warm, kernel cold full read, kernel cold import torch) seconds."""
    warm = timed(lambda: subprocess.run(["sqfs2tar", str(sqsh)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, check=True))
    if not can_mount():
        return warm, None, None
    with mounted(sqsh, work / "mnt") as root:
        drop_caches()
        full = timed(lambda: subprocess.run(f"tar -C {root} -cf - . | cat > /dev/null",
                                            shell=True, check=True))
        python = root / "opt/venv/bin/python"
        imported = None
        if python.exists() or python.is_symlink():
            drop_caches()
            imported = timed(lambda: chrooted(root, "/opt/venv/bin/python", "-c",
                                              "import torch"))
    return warm, full, imported


def table(image: str, work: Path, grid: str, rounds: int) -> None:
    size, _ = content_of(image)
    mib = size / (1 << 20)
    tool = find_squash_tool("tar2sqfs")
    print(f"\n== compression trade-off on {image} ({mib:.0f} MiB of files; squash from the "
          f"engine's storage with tar2sqfs, best of {rounds}; read times: sqfs2tar warm, "
          "kernel mount cold: every file / import torch)", flush=True)
    print(f"   {'setting':22} {'squash s':>8} {'MiB':>6} {'ratio':>6} {'sqfs2tar s':>10} "
          f"{'cold read s':>11} {'cold import s':>13}")
    for text in grid.split(","):
        compression = parse_setting(text)
        target = work / "table.sqsh"
        best = None
        content_of(image)  # the image's files back in the page cache (the reads drop it)
        for _ in range(rounds):
            result = squash_image(docker_source(image), target, compression=compression,
                                  tool=tool)
            best = result.seconds if best is None else min(best, result.seconds)
        warm, full, imported = read_times(target, work)
        size_mib = target.stat().st_size / (1 << 20)
        cold = f"{full:.1f}" if full is not None else "n/a"
        startup = f"{imported:.1f}" if imported is not None else "n/a"
        print(f"   {compression!s:22} {best:8.1f} {size_mib:6.0f} {mib / size_mib:6.2f} "
              f"{warm:10.1f} {cold:>11} {startup:>13}", flush=True)
        target.unlink()
        target.with_name(target.name + ".sha256").unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", default="demo,libs",
                        help="demo, libs or image references, comma-separated (default: both)")
    parser.add_argument("--methods", default="cli,cli-export,enroot",
                        help=f"of {', '.join(METHODS)} (default: all)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default: 3)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where outputs go, the same disk for every method")
    parser.add_argument("--table", action="store_true",
                        help="the compression trade-off instead of the comparison")
    parser.add_argument("--grid", default=DEFAULT_GRID,
                        help=f"settings for --table (default: {DEFAULT_GRID})")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(dir=args.workdir, prefix="squash-bench-"))
    makers = {"demo": make_demo_image, "libs": make_libs_image}
    summary: list[tuple[str, dict[str, Result]]] = []
    try:
        images = [makers[name](work) if name in makers else name
                  for name in args.images.split(",")]
        for image in images:
            if args.table:
                table(image, work, args.grid, args.repeat)
            else:
                summary.append((image, compare(image, work, args.methods.split(","),
                                               args.repeat)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if len(summary) > 1 and all({"cli", "enroot"} <= set(r) for _, r in summary):
        print("\n== summary: imagebuild squash (CLI) against enroot's method, best of "
              f"{args.repeat}")
        for image, results in summary:
            cli, enroot = results["cli"].best, results["enroot"].best
            print(f"   {image:34} {cli.seconds:5.1f} s vs {enroot.seconds:5.1f} s: "
                  f"{enroot.seconds / cli.seconds:4.1f}x faster, "
                  f"{cli.size / (1 << 20):4.0f} vs {enroot.size / (1 << 20):4.0f} MiB "
                  f"({100 * cli.size / enroot.size:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
