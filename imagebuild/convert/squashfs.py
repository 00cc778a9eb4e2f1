"""Image -> .sqsh for CSCS's Container Engine and enroot (and, wrapped, Apptainer's .sif).

The container filesystem streams from the engine (read from its storage where that works
here, else exported: imagebuild.convert.sources) through a tar filter
(``imagebuild.convert.tarfilter``) into ``tar2sqfs`` (squashfs-tools-ng) or, as fallback,
``mksquashfs - out -tar`` (squashfs-tools >= 4.5): no temporary rootfs directory, no
temporary tar. The filter writes the runtime files (``imagebuild.convert.runtime_files``)
into the stream, so the image behaves as if imported by ``enroot import dockerd://`` and
``apptainer run x.sqsh`` works too; the .sif embeds these very bytes: one read, one
compression, two formats. Reader, filter and compressor run at once, so on few cores the
squash is bound by their CPU time together; ``SquashTimings`` says how it was spent.

Reproducible: two builds of the same recipe and lock give the same bytes. Members keep the
export's order (docker walks the filesystem in lexical order); every mtime later than the
lock's SOURCE_DATE_EPOCH (``reproducible_epoch``; imagebuild.lock.epoch) is clamped to it:
the files the build wrote and those the engine stamps at container creation, while the
pinned inputs keep theirs (timestamp-based .pyc files of the base image are validated
against them); the root inode and injected files get that time too. (With the mksquashfs
fallback the root directory carries the wall time: squashfs-tools 4.5.1 ignores -root-time
in -tar mode.) Differences from enroot, on purpose:
ownership is kept as in the image (enroot runs ``mksquashfs -all-root`` because it extracts
unprivileged).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from imagebuild.convert.artifacts import Artifact, flushing, publish
from imagebuild.convert.runtime_files import runtime_entries
from imagebuild.convert.sources import ImageConfig, ImageSource
from imagebuild.convert.tarfilter import (
    RootfsEntry,
    StreamObserver,
    StreamStats,
    filter_rootfs_tar,
)
from imagebuild.convert.tarstream import PipeWriter
from imagebuild.convert.timings import SquashTimings, children_cpu
from imagebuild.errors import EngineError, SquashError
from imagebuild.files import remove_quietly, temporary_name
from imagebuild.lock.epoch import EPOCH_LABEL
from imagebuild.process import DEFAULT_RUNNER, CommandRunner

# --- compression ------------------------------------------------------------------------------

#: algorithm -> (lowest level, highest level, level when none is asked for); None: no level.
_LEVELS: dict[str, tuple[int, int, int] | None] = {
    "zstd": (1, 22, 2),
    "gzip": (1, 9, 9),
    "xz": (0, 9, 6),
    "lzo": (1, 9, 8),
    "lz4": None,
}
ALGORITHMS = tuple(_LEVELS)


#: squashfs block sizes: powers of two from 4 KiB to 1 MiB (the format's limits).
_BLOCK_SIZES = tuple(1 << shift for shift in range(12, 21))
#: 128 KiB, both tools' default: benchmarks/squash_bench.py --table measures 256 KiB and
#: 1 MiB 5 to 9 % smaller but read back cold through the kernel 1.5x to 2.6x slower (a
#: small file in a 1 MiB fragment block costs the whole block's decompression).
DEFAULT_BLOCK_SIZE = 128 << 10


def parse_size(text: str) -> int:
    """``131072``, ``128K``, ``1M`` -> bytes (SquashError naming --block-size otherwise)."""
    match = re.fullmatch(r"(\d+)\s*([KkMm]?)(?:i?[Bb])?", text.strip())
    if not match:
        raise SquashError(f"--block-size: expected bytes or a size like 128K or 1M, got {text!r}")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20}[match.group(2).lower()]
    return int(match.group(1)) * scale


@dataclass(frozen=True)
class Compression:
    algorithm: str
    level: int | None = None
    block_size: int = DEFAULT_BLOCK_SIZE

    def __post_init__(self) -> None:
        if self.algorithm not in _LEVELS:
            raise SquashError(f"--compression: expected one of {', '.join(ALGORITHMS)}, "
                              f"got {self.algorithm!r}")
        bounds = _LEVELS[self.algorithm]
        if self.level is not None:
            if bounds is None:
                raise SquashError(f"--level: {self.algorithm} takes no compression level")
            if not bounds[0] <= self.level <= bounds[1]:
                raise SquashError(f"--level: {self.algorithm} levels are {bounds[0]}..{bounds[1]},"
                                  f" got {self.level}")
        if self.block_size not in _BLOCK_SIZES:
            raise SquashError(f"--block-size: squashfs takes a power of two from 4K to 1M, "
                              f"got {self.block_size} bytes")

    @property
    def effective_level(self) -> int | None:
        bounds = _LEVELS[self.algorithm]
        return self.level if self.level is not None else (bounds[2] if bounds else None)

    def __str__(self) -> str:
        level = self.effective_level
        text = self.algorithm if level is None else f"{self.algorithm}:{level}"
        if self.block_size != DEFAULT_BLOCK_SIZE:
            text += f", {self.block_size >> 10}K blocks"
        return text

    def tar2sqfs_args(self) -> list[str]:
        args = ["--compressor", self.algorithm, "--block-size", str(self.block_size)]
        level = self.effective_level
        if level is not None:
            args += ["--comp-extra", f"level={level}"]
        return args

    def mksquashfs_args(self) -> list[str]:
        args = ["-comp", self.algorithm, "-b", str(self.block_size)]
        level = self.effective_level
        if self.algorithm == "xz":
            if self.level is not None:
                raise SquashError("--level: mksquashfs has no xz level; install squashfs-tools-ng")
        elif level is not None:
            args += ["-Xcompression-level", str(level)]
        return args


#: zstd level 2 in 128 KiB blocks, from benchmarks/squash_bench.py --table (2 cores; the
#: README has the table): against level 3, 2 to 3 % larger and 10 to 20 % less compressor
#: CPU (tar2sqfs alone on the demo image's 1 GiB: 5.6 against 6.7-8.0 CPU-seconds), which on
#: the few cores of a CI runner or a busy login node is most of a squash; level 1 saves
#: another 10 % for 3.5 % more; decompression reads back at the same speed at every level.
#: Bigger blocks are smaller but slower to read cold (DEFAULT_BLOCK_SIZE).
DEFAULT_COMPRESSION = Compression("zstd", 2)


def parse_compression(algorithm: str | None, level: int | None,
                      block_size: str | None = None) -> Compression:
    block = parse_size(block_size) if block_size else DEFAULT_BLOCK_SIZE
    if algorithm is None:
        return Compression("zstd", DEFAULT_COMPRESSION.level if level is None else level, block)
    return Compression(algorithm, level, block)


def add_compression_arguments(parser: Any) -> None:
    """--compression, --level and --block-size, as squash and build take them."""
    parser.add_argument("--compression", choices=ALGORITHMS, default=None,
                        help=f"squashfs compressor (default: {DEFAULT_COMPRESSION}, measured: "
                             "see the README's Squash section)")
    parser.add_argument("--level", type=int, default=None, help="compression level")
    parser.add_argument("--block-size", default=None, metavar="SIZE",
                        help="squashfs block size, 4K to 1M (default: 128K)")


# --- the squashfs tool ------------------------------------------------------------------------

#: tar2sqfs blocks in flight per compressor job (see SquashTool.argv).
QUEUE_BLOCKS_PER_JOB = 100
#: The tool's stdin pipe: 1 MiB (the default /proc/sys/fs/pipe-max-size) instead of 64 KiB,
#: fewer context switches between the filter and the tool.
_PIPE_SIZE = 1 << 20


def _widen_pipe(pipe: IO[bytes]) -> None:
    try:
        import fcntl

        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    except (ImportError, AttributeError, OSError, ValueError):
        pass  # not Linux, or a lower pipe-max-size: the default pipe works, a bit slower


@dataclass(frozen=True)
class SquashTool:
    name: str  # "tar2sqfs" | "mksquashfs"
    path: str

    def argv(self, output: Path, compression: Compression, epoch: int, jobs: int) -> list[str]:
        if self.name == "tar2sqfs":
            # A deeper block queue than tar2sqfs's default (10 per job): the export and
            # the compressors share the cores and arrive in bursts; 100 blocks of 128 KiB
            # per job let one run ahead while the other catches up (benchmarks/
            # squash_bench.py: about 1 s of 7 on the 857 MiB image, 2 cores). Same bytes.
            return [self.path, "--quiet", "--num-jobs", str(jobs),
                    "--queue-backlog", str(QUEUE_BLOCKS_PER_JOB * jobs),
                    *compression.tar2sqfs_args(),
                    # Root inode and implicit directories: root-owned 0755 at the clamp time.
                    "--defaults", f"uid=0,gid=0,mode=0755,mtime={epoch}",
                    str(output)]
        # mksquashfs reads tar from stdin since 4.5; it needs the root's mode spelled out.
        return [self.path, "-", str(output), "-tar", "-noappend", "-quiet", "-no-progress",
                "-processors", str(jobs), *compression.mksquashfs_args(),
                "-root-mode", "0755", "-root-uid", "0", "-root-gid", "0",
                "-root-time", str(epoch), "-mkfs-time", str(epoch)]


def find_squash_tool(prefer: str | None = None,
                     which: Callable[[str], str | None] = shutil.which,
                     runner: CommandRunner = DEFAULT_RUNNER) -> SquashTool:
    """tar2sqfs if installed (streams, keeps xattrs, multi-threaded), else mksquashfs -tar."""
    order = [prefer] if prefer else ["tar2sqfs", "mksquashfs"]
    for name in order:
        if name not in ("tar2sqfs", "mksquashfs"):
            raise SquashError(f"--tool: expected tar2sqfs or mksquashfs, got {name!r}")
        path = which(name)
        if path and (name == "tar2sqfs" or _mksquashfs_reads_tar(path, runner)):
            return SquashTool(name, path)
    wanted = " or ".join(order)
    raise SquashError(f"squash: {wanted} not found on PATH",
                      hint="install squashfs-tools-ng (tar2sqfs) or squashfs-tools >= 4.5 "
                           "(mksquashfs -tar)")


def _mksquashfs_reads_tar(path: str, runner: CommandRunner) -> bool:
    try:
        probe = runner.capture([path, "-version"], step="mksquashfs -version", check=False)
    except EngineError:
        return False
    match = re.search(r"version (\d+)\.(\d+)", probe.stdout + probe.stderr)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (4, 5)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)



def reproducible_epoch(config: ImageConfig, environ: dict[str, str] | None = None) -> int:
    """The clamp time: $SOURCE_DATE_EPOCH if set (the reproducible-builds convention
    BuildKit follows too), else the image's ``imagebuild.source-date-epoch`` label (the
    time its lock was written: imagebuild.lock.epoch), else the image creation time (an
    image not built from a lock; not reproducible: that is the build's wall time)."""
    env = os.environ if environ is None else environ
    for where, value in (("SOURCE_DATE_EPOCH", env.get("SOURCE_DATE_EPOCH", "")),
                         (f"label {EPOCH_LABEL}", dict(config.labels).get(EPOCH_LABEL, ""))):
        value = value.strip()
        if value:
            if not value.isdigit():
                raise SquashError(f"{where}: expected whole seconds, got {value!r}")
            return int(value)
    return config.created if config.created is not None else 0



# --- running the pipeline ---------------------------------------------------------------------

@dataclass(frozen=True)
class SquashResult:
    artifact: Artifact
    tool: str
    compression: str
    stats: StreamStats
    seconds: float
    timings: SquashTimings | None = None

    @property
    def throughput_mib_s(self) -> float:
        return self.stats.bytes_in / (1 << 20) / self.seconds if self.seconds else 0.0


_ENOSPC = re.compile(r"no space left on device|disk quota exceeded|file too large", re.IGNORECASE)


def _free_mib(directory: Path) -> float:
    try:
        stat = os.statvfs(directory)
    except OSError:
        return float("nan")
    return stat.f_bavail * stat.f_frsize / (1 << 20)


def _drain(stream: IO[bytes], tail: deque[str]) -> None:
    for raw in stream:
        line = raw.decode(errors="replace").rstrip()
        if line:
            tail.append(line)


def _cannot_start(argv: Sequence[str], exc: BaseException) -> SquashError:
    cause = exc.__cause__ if isinstance(exc, EngineError) else exc
    reason = getattr(cause, "strerror", None) or str(exc)
    return SquashError(f"squash: cannot start {argv[0]}: {reason}")


def run_squash_tool(
    argv: Sequence[str],
    feed: Callable[[IO[bytes]], StreamStats],
    output: Path,
    runner: CommandRunner = DEFAULT_RUNNER,
) -> StreamStats:
    """Run the squashfs tool with ``feed`` writing the tar stream into its stdin.

    The runner stops the tool on any exception, Ctrl-C included. A tool failure becomes one
    SquashError naming the tool and the output, plus the tail of what the tool said.
    """
    tool = Path(argv[0]).name
    tail: deque[str] = deque(maxlen=20)
    stats: StreamStats | None = None
    with ExitStack() as stack:
        try:
            proc = stack.enter_context(runner.spawn(
                argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE))
        except (EngineError, OSError) as exc:
            raise _cannot_start(argv, exc) from exc
        assert proc.stdin is not None
        _widen_pipe(proc.stdin)
        drainer = threading.Thread(target=_drain, args=(proc.stderr, tail), daemon=True)
        drainer.start()
        stdin = PipeWriter(proc.stdin)
        try:
            stats = feed(stdin)  # type: ignore[arg-type]
            proc.stdin.close()
        except BrokenPipeError:
            pass  # the tool exited early; its status and stderr say why
        returncode = proc.wait()
        drainer.join(timeout=10)
    said = "\n".join(tail)
    if returncode == 0 and stats is not None:
        return stats
    detail = f"\n{said}" if said else ""
    free = _free_mib(output.parent)
    if _ENOSPC.search(said):
        raise SquashError(f"squash: {tool} ran out of space writing {output.parent} "
                          f"({free:.1f} MiB free); nothing was kept{detail}")
    fed = stdin.count / (1 << 20)
    if "I/O error" in said and free < fed:
        # tar2sqfs 1.2 reports a failed write as "I/O error" without errno (and deletes
        # its output), so judge by the room left against what was streamed in.
        raise SquashError(f"squash: {tool} failed writing {output.parent} (I/O error) with "
                          f"{free:.1f} MiB free after {fed:.1f} MiB of input: most likely a "
                          f"full disk; nothing was kept{detail}")
    status = f"exit status {returncode}" if returncode else "it stopped reading its input"
    raise SquashError(f"squash: {tool} failed writing {output.name} ({status}); "
                      f"nothing was kept{detail}")


def squash_image(
    source: ImageSource,
    output: Path,
    *,
    compression: Compression = DEFAULT_COMPRESSION,
    tool: SquashTool | None = None,
    entries: Iterable[RootfsEntry] | None = None,
    epoch: int | None = None,
    jobs: int | None = None,
    runner: CommandRunner = DEFAULT_RUNNER,
    observer: StreamObserver | None = None,
) -> SquashResult:
    """Stream ``source`` into a squashfs at ``output``, atomically, with a .sha256 beside.

    ``entries`` defaults to ``runtime_entries(config)``; ``observer`` sees the stream (sizes,
    SBOM: imagebuild.convert.inventory). Raises SquashError (tool failure,
    full disk), EngineError (export failed); on any failure no file is left at ``output``
    nor under a temporary name.
    """
    started = time.monotonic()
    cpu_before = children_cpu()
    tool = tool or find_squash_tool(runner=runner)
    config = source.config()
    epoch = reproducible_epoch(config) if epoch is None else epoch
    entries = runtime_entries(config) if entries is None else list(entries)
    output.parent.mkdir(parents=True, exist_ok=True)
    temp = temporary_name(output)
    jobs = jobs or default_jobs()
    marks: dict[str, float] = {}
    try:
        argv = tool.argv(temp, compression, epoch, jobs)

        def feed(stdin: IO[bytes]) -> StreamStats:
            with source.rootfs_tar() as stream:
                marks["open"], filter_started = time.monotonic(), time.thread_time()
                try:
                    stats = filter_rootfs_tar(stream, stdin, entries, clamp_mtime=epoch,
                                              keep_root_entry=tool.name == "tar2sqfs",
                                              observer=observer)
                except BrokenPipeError:
                    raise  # the tool stopped reading: run_squash_tool reports why
                except (tarfile.TarError, OSError) as exc:
                    raise SquashError(f"export: reading the filesystem of {source.description} "
                                      f"failed: {exc}") from exc
                marks["filter_cpu"] = time.thread_time() - filter_started
            marks["reader_cpu"] = children_cpu()  # the reader has been waited for
            return stats

        with flushing(temp):
            stats = run_squash_tool(argv, feed, output, runner=runner)
        streamed = time.monotonic()
        artifact = publish(temp, output, "sqsh", streamed - started)
    except BaseException:
        remove_quietly(temp)
        raise
    finished = time.monotonic()
    timings = SquashTimings(
        read_by=source.read_by, jobs=jobs, config_s=marks["open"] - started,
        stream_s=streamed - marks["open"], reader_cpu_s=marks["reader_cpu"] - cpu_before,
        filter_cpu_s=marks["filter_cpu"], tool_cpu_s=children_cpu() - marks["reader_cpu"],
        publish_s=finished - streamed, total_s=finished - started)
    return SquashResult(artifact=replace(artifact, seconds=finished - started, timings=timings),
                        tool=tool.name, compression=str(compression), stats=stats,
                        seconds=finished - started, timings=timings)
