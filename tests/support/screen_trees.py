"""Node trees for the screen's tests: a node shape from the doctor's fixtures (/sys and
/proc of an MI300X or MI300A node), completed with what the screen reads (limits,
/dev/shm's mount, the kernel log, the KFD's process list, links, firmware), healthy; then
one planted fault per case. The kernel-log lines are real ones, from the public reports
named beside them."""

from __future__ import annotations

import shutil
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "inimage" / "doctor" / "fixtures"

# /dev/kmsg records: "<level>,<seq>,<usec since boot>,-;<text>" (dev-kmsg ABI).
BENIGN = [
    (6, "amdgpu 0000:33:00.0: amdgpu: RAS: optional ras ta ucode is not available"),
    # ^ tomsom/yoga-linux#38: an info line that mentions RAS and is not an error
    (6, "[drm] amdgpu: 98304M of VRAM memory ready"),  # ROCm/TheRock#1054
    (4, "[Firmware Bug]: TSC doesn't count with P0 frequency!"),
]
#: One real line per kernel-log class, with where it was reported.
GPU_ERRORS = {
    # ROCm/legacy-rocm-build#2533
    "ring_timeout": (3, ("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 timeout, "
                        "signaled seq=16060, emitted seq=16062")),
    # ROCm/legacy-rocm-build#2533
    "gpu_reset": (6, "amdgpu 0000:0a:00.0: amdgpu: GPU reset begin!"),
    # ROCm/legacy-rocm-build#4021 (MI300X)
    "ras": (6, ("amdgpu 0000:1c:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) "
               "detected!")),
    # ROCm/amdgpu#172
    "page_fault": (3, ("amdgpu 0000:c6:00.0: amdgpu: [gfxhub0] no-retry page fault "
                      "(src_id:0 ring:24 vmid:3 pasid:32769)")),
    # NVIDIA/NVSentinel#155
    "nvidia_xid": (4, "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"),
    # the driver's own message (drivers/gpu/drm/amd/amdgpu/amdgpu_psp.c, dev_err)
    "xgmi": (3, "amdgpu 0000:05:00.0: amdgpu: XGMI: Failed to initialize XGMI session"),
}


def kmsg(records: list[tuple[int, str]], start_s: float = 5.0) -> str:
    return "".join(f"{level},{seq},{int((start_s + seq) * 1e6)},-;{text}\n"
                   for seq, (level, text) in enumerate(records))


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def healthy(directory: Path, name: str = "nid001", shape: str = "mi300x") -> Path:
    """A node of ``shape`` that passes every host item."""
    root = directory / name
    shutil.copytree(FIXTURES / "nodes" / shape, root)
    write(root, "proc/sys/kernel/hostname", f"{name}\n")
    write(root, "proc/uptime", "864000.00 1000.00\n")
    write(root, "proc/meminfo", "MemTotal:       1584000000 kB\n")
    write(root, "proc/self/limits",
          "Limit                     Soft Limit           Hard Limit           Units     \n"
          "Max locked memory         unlimited            unlimited            bytes     \n")
    mounts = (root / "proc/mounts").read_text()
    write(root, "proc/mounts", mounts + "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n")
    write(root, "dev/kmsg", kmsg(BENIGN))
    (root / "sys/class/kfd/kfd/proc").mkdir(parents=True, exist_ok=True)
    for port in range(1, 3):  # two InfiniBand ports, up
        base = f"sys/class/infiniband/mlx5_{port}"
        write(root, f"{base}/ports/1/state", "4: ACTIVE\n")
        write(root, f"{base}/ports/1/phys_state", "5: LinkUp\n")
        write(root, f"{base}/fw_ver", "28.39.1002\n")
    for card in range(2):
        base = f"sys/class/drm/card{card}/device"
        write(root, f"{base}/vendor", "0x1002\n")
        write(root, f"{base}/vbios_version", "113-M3000100-103\n")
        write(root, f"{base}/fw_version/mec_fw_version", "0x00000099\n")
    return root


def plant(root: Path, fault: str) -> None:
    """One fault: low-memlock, small-shm, kernel-log (a ring timeout), foreign-process,
    link-down."""
    if fault == "low-memlock":
        write(root, "proc/self/limits",
              "Max locked memory         8388608              8388608              bytes\n")
    elif fault == "small-shm":
        mounts = (root / "proc/mounts").read_text().replace(
            "tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0", "shm /dev/shm tmpfs rw,size=65536k 0 0")
        write(root, "proc/mounts", mounts)
    elif fault == "kernel-log":
        write(root, "dev/kmsg", kmsg([*BENIGN, GPU_ERRORS["ring_timeout"]]))
    elif fault == "foreign-process":
        (root / "sys/class/kfd/kfd/proc/4242").mkdir(parents=True)
        write(root, "proc/4242/comm", "python3\n")
        write(root, "proc/4242/status", "Name:\tpython3\nUid:\t1234\t1234\t1234\t1234\n")
    elif fault == "link-down":
        write(root, "sys/class/infiniband/mlx5_2/ports/1/state", "1: DOWN\n")
    else:
        raise ValueError(fault)


FAULTS = {"low-memlock": "memlock", "small-shm": "shm", "kernel-log": "kernel-log",
          "foreign-process": "gpu-processes", "link-down": "links"}
