"""Where a squash's seconds go.

The stream runs its parts at once (the reader, the tar filter, the compressor jobs), so
their wall times overlap; what each part costs is its CPU time: the reader's and the
tool's from the kernel's accounting of waited children (``getrusage(RUSAGE_CHILDREN)``,
which includes their own children: tar under ``unshare sh``), the filter's from its
thread's clock. Reading through ``docker export`` spends its CPU in dockerd, which is not
our child: that part reads 0 here and the benchmark (benchmarks/squash_bench.py) takes it
from dockerd's /proc entry.
"""

from __future__ import annotations

import resource
from dataclasses import dataclass


def children_cpu() -> float:
    """User + system seconds of every child waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class SquashTimings:
    """One squash: wall times of its phases, CPU seconds of the stream's parts."""

    read_by: str  # how the filesystem was read ("overlay2 storage, 5 layers", ...)
    jobs: int  # compressor jobs
    config_s: float  # image configuration and the reader's setup (container, mount probe)
    stream_s: float  # first byte read to the tool's exit (read, filter, compress at once)
    reader_cpu_s: float  # the reading process (tar, podman); 0 for docker export
    filter_cpu_s: float  # this process's filter thread (and the SDK's reads, for export)
    tool_cpu_s: float  # tar2sqfs / mksquashfs, all its threads
    publish_s: float  # sha256 and fsync side by side, then the rename
    total_s: float

    def line(self) -> str:
        return (f"time {self.total_s:.1f} s: setup {self.config_s:.1f} s, stream "
                f"{self.stream_s:.1f} s (CPU: read {self.reader_cpu_s:.1f} s, filter "
                f"{self.filter_cpu_s:.1f} s, compress {self.tool_cpu_s:.1f} s on "
                f"{self.jobs} jobs), sha256+fsync+rename {self.publish_s:.1f} s; "
                f"read: {self.read_by}")

    def as_dict(self) -> dict[str, float | int | str]:
        return {key: round(value, 3) if isinstance(value, float) else value
                for key, value in self.__dict__.items()}
