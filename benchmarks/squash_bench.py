#!/usr/bin/env python3
"""Squash speed and size: imagebuild's streaming tar2sqfs path against enroot's method.

Methods, all on the same Docker image and the same output disk:

- ``stream <alg>:<level>``: imagebuild.convert.squashfs.squash_image (docker export -> tar filter ->
  tar2sqfs), for several compressors and levels; time includes export, hashing and rename.
- ``enroot lzo -noD``: what ``enroot import dockerd://`` does: ``docker export | tar -x``
  into a directory, then ``mksquashfs dir x.sqsh -comp lzo -noD`` (ENROOT_SQUASH_OPTIONS
  default); time includes the extraction.
- ``read``: ``sqfs2tar x.sqsh > /dev/null`` afterwards, a proxy for what reading the whole
  image costs at run time (decompression).

Default image: a Debian bookworm minbase rootfs plus the CPU torch wheel unpacked in
site-packages (large shared libraries like a ROCm image), made once with debootstrap and
``docker import`` as ``imagebuild-bench/torch:latest``; ``--image REF`` uses another.

Usage: python benchmarks/squash_bench.py [--image REF] [--wheel WHL] [--workdir DIR]
                                         [--methods zstd:1,zstd:3,...] [--repeat N]

Measured on the project's dev VM (2 vCPUs shared with other jobs, load 1-5; ext4 on
virtio), image squashbench:torch = Debian minbase + torch 2.13 CPU wheel, 857 MiB of file
content in 19,800 files. "read s" = sqfs2tar of the result to /dev/null (page cache warm).

  all methods, one run each:
    method                  seconds      MiB  in MiB/s  ratio  read s
    stream zstd:1               4.0      282       214   3.04     0.6
    stream zstd:3               5.8      268       149   3.20     0.6
    stream zstd:9              11.9      250        72   3.42     0.6
    stream zstd:15             56.5      236        15   3.62     0.7
    stream lzo:8               55.3      288        15   2.98     2.7
    stream gzip:6              18.6      266        46   3.22     2.1
    stream lz4                  4.9      372       176   2.31     0.3
    enroot lzo -noD            17.6      770        49   1.11     0.3
  fast methods, best of 3:
    stream zstd:1               4.5      282       191   3.04     0.6
    stream zstd:3               4.3      268       200   3.20     0.6
    stream zstd:5               5.0      258       170   3.32     0.6
    stream lz4                  3.0      372       286   2.31     0.3
    enroot lzo -noD            11.4      770        75   1.11     0.3

Default chosen from these: zstd level 3. At levels 1-3 the export and the tar filter, not
the compressor, bound the time on 2 cores (zstd:1 and :3 within noise), so level 3 gets 5%
smaller for free; 2.6x faster than the enroot method and 2.9x smaller, and decompression
reads back at ~1.4 GB/s per core. lz4 is 30% faster but 39% larger; zstd:9+ and lzo1x_999
cost 3-13x the time for 7-12% less.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from imagebuild.convert.sources import DockerSource
from imagebuild.convert.squashfs import Compression, find_squash_tool, squash_image

BENCH_IMAGE = "imagebuild-bench/torch:latest"
DEFAULT_METHODS = "cli,zstd:1,zstd:3,zstd:9,zstd:15,lzo,gzip:6,lz4,enroot"


@dataclass
class Row:
    method: str
    seconds: float
    size: int
    read_seconds: float


def docker_cli() -> str:
    return shutil.which("docker") or "docker"


def make_bench_image(workdir: Path, wheel: Path | None) -> str:
    """debootstrap minbase + (optionally) a wheel unpacked into site-packages, imported."""
    have = subprocess.run([docker_cli(), "image", "inspect", BENCH_IMAGE],
                          capture_output=True, check=False)
    if have.returncode == 0:
        return BENCH_IMAGE
    rootfs = workdir / "rootfs"
    print(f"making {BENCH_IMAGE}: debootstrap minbase bookworm ...", flush=True)
    subprocess.run(["debootstrap", "--variant=minbase", "bookworm", str(rootfs)], check=True,
                   stdout=subprocess.DEVNULL)
    if wheel:
        print(f"unpacking {wheel.name} into site-packages ...", flush=True)
        site = rootfs / "usr/local/lib/python3.11/dist-packages"
        site.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."],
                           stdout=subprocess.PIPE)
    subprocess.run([docker_cli(), "import",
                    "-c", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "-c", "WORKDIR /workspace", "-c", 'CMD ["/bin/bash"]', "-", BENCH_IMAGE],
                   stdin=tar.stdout, check=True, stdout=subprocess.DEVNULL)
    tar.wait()
    shutil.rmtree(rootfs, ignore_errors=True)
    return BENCH_IMAGE


def read_back(sqsh: Path) -> float:
    started = time.monotonic()
    subprocess.run(["sqfs2tar", str(sqsh)], stdout=subprocess.DEVNULL, check=True,
                   stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def run_stream(image: str, spec: str, out: Path) -> Row:
    alg, _, level = spec.partition(":")
    compression = Compression(alg, int(level) if level else None)
    target = out / f"stream-{alg}-{level or 'default'}.sqsh"
    result = squash_image(DockerSource(image), target, compression=compression,
                          tool=find_squash_tool("tar2sqfs"))
    row = Row(f"stream {compression}", result.seconds, result.artifact.size,
              read_back(target))
    target.unlink()
    result.artifact.sidecar.unlink()
    return row


def run_enroot(image: str, out: Path) -> Row:
    """docker export | tar -x, then mksquashfs dir -comp lzo -noD (enroot's defaults)."""
    started = time.monotonic()
    name = f"bench-enroot-{os.getpid()}"
    subprocess.run([docker_cli(), "create", "--name", name, image, "/x"], check=True,
                   stdout=subprocess.DEVNULL)
    rootfs = Path(tempfile.mkdtemp(dir=out, prefix="enroot-rootfs-"))
    target = out / "enroot.sqsh"
    try:
        export = subprocess.Popen([docker_cli(), "export", name], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-C", str(rootfs), "--warning=no-timestamp", "--anchored",
                        "--exclude=dev/*", "--exclude=.dockerenv", "-px"],
                       stdin=export.stdout, check=True)
        export.wait()
        subprocess.run(["mksquashfs", str(rootfs), str(target), "-all-root", "-no-progress",
                        "-quiet", "-comp", "lzo", "-noD"], check=True, stdout=subprocess.DEVNULL)
        seconds = time.monotonic() - started
    finally:
        subprocess.run([docker_cli(), "rm", "-f", name], capture_output=True, check=False)
        shutil.rmtree(rootfs, ignore_errors=True)
    row = Row("enroot lzo -noD", seconds, target.stat().st_size, read_back(target))
    target.unlink()
    return row


def run_cli(image: str, out: Path) -> Row:
    """``imagebuild squash IMAGE --formats sqsh`` as users run it (interpreter start, imports,
    the engine round trip, hashing and the atomic rename included)."""
    target_dir = out / "cli"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "imagebuild", "squash", image, "--formats", "sqsh",
                    "--output-dir", str(target_dir)], check=True, stdout=subprocess.DEVNULL,
                   cwd=Path(__file__).resolve().parents[1])
    seconds = time.monotonic() - started
    target = next(target_dir.glob("*.sqsh"))
    row = Row("imagebuild squash (CLI)", seconds, target.stat().st_size, read_back(target))
    shutil.rmtree(target_dir)
    return row


def timed(what: str, action: Callable[[], object]) -> tuple[str, float]:
    started = time.monotonic()
    action()
    return what, time.monotonic() - started


def breakdown(image: str, out: Path, jobs: int) -> list[tuple[str, float]]:
    """Each part of both methods alone, on the same image and disk: where the seconds go.
    The stream overlaps its parts (export, filter and compressor run at once), so its total
    is below their sum when cores are free and near it when they are not."""
    from imagebuild.convert.squashfs import DEFAULT_COMPRESSION
    from imagebuild.convert.tarfilter import filter_rootfs_tar
    from imagebuild.files import sha256_file

    exported, filtered, target = out / "export.tar", out / "filtered.tar", out / "parts.sqsh"
    rootfs = out / "parts-rootfs"

    def export_to(path: Path | None) -> None:
        with DockerSource(image).rootfs_tar() as stream, \
                open(path or os.devnull, "wb") as sink:
            shutil.copyfileobj(stream, sink, 1 << 20)

    def filter_file() -> None:
        with open(exported, "rb") as src, open(filtered, "wb") as dst:
            filter_rootfs_tar(src, dst, clamp_mtime=0)

    def compress() -> None:
        with open(filtered, "rb") as src:
            subprocess.run([find_squash_tool("tar2sqfs").path, "--quiet", "--force",
                            "--num-jobs", str(jobs), *DEFAULT_COMPRESSION.tar2sqfs_args(),
                            str(target)], stdin=src, check=True)

    def extract() -> None:
        rootfs.mkdir()
        subprocess.run(["tar", "-C", str(rootfs), "--warning=no-timestamp", "-px", "-f",
                        str(exported)], check=True)

    def mksquashfs() -> None:
        subprocess.run(["mksquashfs", str(rootfs), str(out / "parts-enroot.sqsh"), "-all-root",
                        "-no-progress", "-quiet", "-comp", "lzo", "-noD"], check=True,
                       stdout=subprocess.DEVNULL)

    export_to(exported)  # the input of the parts below, on the output disk
    try:
        return [
            timed("export (engine -> /dev/null)", lambda: export_to(None)),
            timed("tar filter (file -> file)", filter_file),
            timed(f"tar2sqfs {DEFAULT_COMPRESSION} -j{jobs} (file)", compress),
            timed("sha256 of the .sqsh", lambda: sha256_file(target)),
            timed("enroot: tar -x (file -> dir)", extract),
            timed("enroot: mksquashfs lzo -noD", mksquashfs),
        ]
    finally:
        shutil.rmtree(rootfs, ignore_errors=True)
        for path in (exported, filtered, target, out / "parts-enroot.sqsh"):
            path.unlink(missing_ok=True)


def input_size(image: str) -> int:
    with DockerSource(image).rootfs_tar() as stream, tarfile.open(fileobj=stream, mode="r|") \
            as tar:
        return sum(m.size for m in tar if m.isreg())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default=None, help=f"image to squash (default: {BENCH_IMAGE})")
    parser.add_argument("--wheel", type=Path, default=next(Path("/opt/wheels").glob("torch-*.whl"),
                                                           None),
                        help="a wheel to unpack into the default image (big .so files)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()),
                        help="where outputs go (same disk for every method)")
    parser.add_argument("--methods", default=DEFAULT_METHODS,
                        help=f"comma-separated (default: {DEFAULT_METHODS})")
    parser.add_argument("--repeat", type=int, default=2, help="runs per method; best is kept")
    parser.add_argument("--breakdown", action="store_true",
                        help="also time each part of both methods alone")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(dir=args.workdir, prefix="squash-bench-"))
    try:
        image = args.image or make_bench_image(work, args.wheel)
        mib_in = input_size(image) / (1 << 20)
        print(f"image {image}: {mib_in:.0f} MiB of file content; {os.cpu_count()} CPUs; "
              f"best of {args.repeat}", flush=True)
        print(f"{'method':22} {'seconds':>8} {'MiB':>8} {'in MiB/s':>9} {'ratio':>6} "
              f"{'read s':>7}")
        for method in args.methods.split(","):
            best: Row | None = None
            for _ in range(args.repeat):
                row = run_enroot(image, work) if method == "enroot" else \
                    run_cli(image, work) if method == "cli" else \
                    run_stream(image, method, work)
                best = row if best is None or row.seconds < best.seconds else best
            assert best is not None
            size = best.size / (1 << 20)
            print(f"{best.method:22} {best.seconds:8.1f} {size:8.0f} "
                  f"{mib_in / best.seconds:9.0f} {mib_in / size:6.2f} "
                  f"{best.read_seconds:7.1f}", flush=True)
        if args.breakdown:
            jobs = len(os.sched_getaffinity(0))
            print("time breakdown, each part alone (best of "
                  f"{args.repeat}):", flush=True)
            runs = [breakdown(image, work, jobs) for _ in range(args.repeat)]
            for index, (what, _) in enumerate(runs[0]):
                print(f"  {what:36} {min(run[index][1] for run in runs):6.1f} s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
