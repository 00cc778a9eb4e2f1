"""What every check gets: the rank's place in the job, its device, peak and thresholds.

Results and small facts travel between ranks over a gloo group (the "control" group) so
that exchanging Python objects never touches the GPU collectives being measured.
"""

from __future__ import annotations

import argparse
import pickle
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .gpu import DeviceInfo
from .gpu_data import GpuMatch
from .job_rank import Launch


class RanksOutOfStep(RuntimeError):
    """Ranks reached different exchanges: one left a check early (it raised)."""


@dataclass
class Context:
    options: argparse.Namespace
    launch: Launch
    mode: str  # "gpu" or "cpu"
    device: torch.device
    backend: str  # "nccl" (RCCL on ROCm) or "gloo"
    gpu_data: Mapping[str, Any]
    workdir: Path
    hosts: list[str] = field(default_factory=list)
    gpu: DeviceInfo | None = None
    gpu_match: GpuMatch | None = None
    peak_tflops: float | None = None
    peak_source: str = ""
    partition: dict[str, Any] | None = None  # when the device is a partition of a GPU
    thresholds: dict[str, float] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    manifest_path: str = ""
    manifest_problem: str | None = None
    nccl_log_pattern: str | None = None
    control_group: Any = None
    #: The rendezvous store (rendezvous.py): each rank's progress marks live there.
    store: Any = None

    @property
    def rank(self) -> int:
        return self.launch.rank

    @property
    def world_size(self) -> int:
        return self.launch.world_size

    @property
    def host(self) -> str:
        return self.hosts[self.rank] if self.hosts else socket.gethostname()

    @property
    def nodes(self) -> int:
        return len(set(self.hosts)) if self.hosts else 1

    @property
    def local_ranks(self) -> list[int]:
        """Global ranks on this rank's host (from the gathered host names, not SLURM math)."""
        return [r for r, h in enumerate(self.hosts) if h == self.host] or [self.rank]

    @property
    def local_world_size(self) -> int:
        return len(self.local_ranks)

    @property
    def gpu_model(self) -> str | None:
        return self.gpu_match.model.model if self.gpu_match and self.gpu_match.model else None

    def all_gather_object(self, obj: Any, tag: str = "data") -> list[Any]:
        """Every rank's ``obj``, in rank order, over the CPU (gloo) control group.

        Not ``dist.all_gather_object``: it converts through ``tensor.numpy()``, and an image
        need not have numpy (the checks import only the stdlib and torch).

        The tag names the exchange: when a rank that raised out of a check meets another
        rank's next exchange, the tags differ and both raise instead of reading each
        other's data.
        """
        if self.world_size == 1 or not dist.is_initialized():
            return [obj]
        gathered = self._gather((tag, obj))
        strays = {rank: t for rank, (t, _) in enumerate(gathered) if t != tag}
        if strays:
            raise RanksOutOfStep(f"ranks out of step: rank {self.rank} at {tag!r}, "
                                 + ", ".join(f"rank {r} at {t!r}" for r, t in strays.items()))
        return [value for _, value in gathered]

    def _gather(self, obj: Any) -> list[Any]:
        payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
        sizes = [torch.zeros(1, dtype=torch.long) for _ in range(self.world_size)]
        dist.all_gather(sizes, torch.tensor([payload.numel()], dtype=torch.long),
                        group=self.control_group)
        longest = max(int(size.item()) for size in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: payload.numel()] = payload
        buffers = [torch.empty(longest, dtype=torch.uint8) for _ in range(self.world_size)]
        dist.all_gather(buffers, padded, group=self.control_group)
        return [pickle.loads(bytes(buffer[: int(size.item())].tolist()))
                for buffer, size in zip(buffers, sizes)]

    def agree(self, ok: bool) -> bool:
        """True when every rank says ok: a rank that failed to set up tells the others
        before they enter a collective it would never join."""
        return all(self.all_gather_object(bool(ok), tag="agree"))

    def max_over_ranks(self, value: float) -> float:
        return max(float(v) for v in self.all_gather_object(float(value), tag="max"))

    def barrier(self) -> None:
        if self.world_size > 1 and dist.is_initialized():
            dist.barrier(group=self.control_group)
