"""What a node has, read from files under a root directory (default "/"): the amdgpu
driver (/sys/module/amdgpu), its GPUs (the KFD topology), mounts (/proc/mounts,
/proc/self/mountinfo) and the kernel release. Missing files mean "not there", never an
error: a login node has no GPUs, a container may hide /sys/module."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: KFD topology: one directory per node, GPUs with a nonzero gfx_target_version
#: (https://github.com/torvalds/linux/blob/master/drivers/gpu/drm/amd/amdkfd/kfd_topology.c,
#: node_show).
TOPOLOGY = "sys/class/kfd/kfd/topology/nodes"


@dataclass(frozen=True)
class Gpu:
    node: int
    gfx: str  # e.g. "gfx942"
    apu: bool  # CPU cores in the same KFD node (MI300A)


@dataclass(frozen=True)
class Mount:
    source: str
    point: str
    fstype: str
    options: tuple[str, ...]
    root: str = "/"  # the directory of the source file system mounted (mountinfo only)


def gfx_name(version: int) -> str:
    """KFD's gfx_target_version (major*10000 + minor*100 + stepping) as an LLVM target
    name: 90010 -> gfx90a, 90402 -> gfx942, 110000 -> gfx1100."""
    major, minor, stepping = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def _unescape(field: str) -> str:
    """Mount fields escape space, tab, newline and backslash as \\ooo (proc(5))."""
    out, index = [], 0
    while index < len(field):
        if field[index] == "\\" and field[index + 1:index + 4].isdigit():
            out.append(chr(int(field[index + 1:index + 4], 8)))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return "".join(out)


class Node:
    """Files of one node (or one container's view of it) under ``root``."""

    def __init__(self, root: str | Path = "/"):
        self.root = Path(root)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> str | None:
        try:
            return self.path(absolute).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    def amdgpu_loaded(self) -> bool:
        return self.path("/sys/module/amdgpu").is_dir()

    def amdgpu_version(self) -> str | None:
        """MODULE_VERSION of the loaded amdgpu: AMD's DKMS driver sets it (e.g. 6.16.6);
        the kernel's own amdgpu has none, so the file is absent."""
        text = self.read("/sys/module/amdgpu/version")
        return text.strip() or None if text is not None else None

    def noretry(self) -> int | None:
        """amdgpu.noretry: 0 lets the GPU retry faulting accesses (XNACK possible), 1 does
        not, -1 leaves it to the driver's per-ASIC default."""
        text = self.read("/sys/module/amdgpu/parameters/noretry")
        try:
            return int(text.strip()) if text is not None else None
        except ValueError:
            return None

    def kernel_release(self) -> str | None:
        text = self.read("/proc/sys/kernel/osrelease")
        return text.strip() if text else None

    def gpus(self) -> list[Gpu]:
        found = []
        topology = self.path("/" + TOPOLOGY)
        nodes = sorted(topology.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1) \
            if topology.is_dir() else []
        for directory in nodes:
            try:
                text = (directory / "properties").read_text()
            except OSError:
                continue
            values: dict[str, int] = {}
            for line in text.splitlines():
                key, _, value = line.partition(" ")
                if value.strip().lstrip("-").isdigit():
                    values[key] = int(value)
            version = values.get("gfx_target_version", 0)
            if version and values.get("simd_count", 0):
                found.append(Gpu(int(directory.name), gfx_name(version),
                                 values.get("cpu_cores_count", 0) > 0))
        return found

    def mounts(self) -> list[Mount]:
        """/proc/mounts: what is mounted where, with which file system type."""
        found = []
        for line in (self.read("/proc/mounts") or "").splitlines():
            fields = line.split()
            if len(fields) >= 4:
                found.append(Mount(_unescape(fields[0]), _unescape(fields[1]), fields[2],
                                   tuple(fields[3].split(","))))
        return found

    def mountinfo(self) -> list[Mount]:
        """/proc/self/mountinfo (proc(5)): also which directory of the source is mounted,
        which shows bind mounts (a host directory over one of the image's)."""
        found = []
        for line in (self.read("/proc/self/mountinfo") or "").splitlines():
            head, sep, tail = line.partition(" - ")
            fields, rest = head.split(), tail.split()
            if not sep or len(fields) < 6 or len(rest) < 2:
                continue
            found.append(Mount(_unescape(rest[1]), _unescape(fields[4]), rest[0],
                               tuple(fields[5].split(",")), root=_unescape(fields[3])))
        return found

    def mount_of(self, path: str, mounts: list[Mount] | None = None) -> Mount | None:
        """The mount holding ``path``: the longest mount point that prefixes it (the last
        such line: a later mount hides an earlier one on the same point)."""
        best: Mount | None = None
        for mount in mounts if mounts is not None else self.mounts():
            point = mount.point.rstrip("/") or "/"
            inside = path == point or path.startswith(point.rstrip("/") + "/")
            if inside and (best is None or len(point) >= len(best.point.rstrip("/") or "/")):
                best = mount
        return best
