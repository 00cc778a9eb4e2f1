"""The compression trade-off of ``squash_bench.py --table``: squash time, size and read time per
zstd level and block size, from the engine's storage with tar2sqfs."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench_images import content_of, docker_source

from imagebuild.convert.squashfs import Compression, find_squash_tool, parse_size, squash_image

DEFAULT_GRID = "zstd:1,zstd:2,zstd:3,zstd:5,zstd:9,zstd:3/256K,zstd:3/1M,lz4,gzip:6"


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


def table(image: str, work: Path, grid: str, rounds: int) -> dict[str, Any]:
    """Print the trade-off for each setting of ``grid``; return it as data for the record."""
    size, members = content_of(image)
    mib = size / (1 << 20)
    tool = find_squash_tool("tar2sqfs")
    print(f"\n== compression trade-off on {image} ({mib:.0f} MiB of files; squash from the "
          f"engine's storage with tar2sqfs, best of {rounds}; read times: sqfs2tar warm, "
          "kernel mount cold: every file / import torch)", flush=True)
    print(f"   {'setting':22} {'squash s':>8} {'MiB':>6} {'ratio':>6} {'sqfs2tar s':>10} "
          f"{'cold read s':>11} {'cold import s':>13}")
    rows: list[dict[str, Any]] = []
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
        rows.append({"setting": str(compression), "squash_best_s": round(best or 0.0, 3),
                     "size_mib": round(size_mib, 1), "ratio": round(mib / size_mib, 3),
                     "sqfs2tar_warm_s": round(warm, 3),
                     "kernel_cold_read_s": None if full is None else round(full, 3),
                     "kernel_cold_import_torch_s":
                         None if imported is None else round(imported, 3)})
        target.unlink()
        target.with_name(target.name + ".sha256").unlink(missing_ok=True)
    return {"image": image, "content_mib": round(mib, 1), "members": members,
            "rounds": rounds, "settings": rows}
