"""The node's name and fingerprint: what a screen compares across a fleet, so that one
node on another kernel, driver or firmware stands out from the rest.

- name: SLURMD_NODENAME (the name srun --exclude takes), else the kernel's host name
  (/proc/sys/kernel/hostname under the root, so a test tree names itself), else
  socket.gethostname();
- kernel: /proc/sys/kernel/osrelease;
- drivers: amdgpu's MODULE_VERSION (/sys/module/amdgpu/version), NVIDIA's
  (/sys/module/nvidia/version);
- per AMD GPU (/sys/class/drm/card*/device, vendor 0x1002): the VBIOS
  (``vbios_version``) and the firmware amdgpu reports in ``fw_version/`` (the sysfs group
  of drivers/gpu/drm/amd/amdgpu/amdgpu_ucode.c: mec, sos, smc, ta_ras, ta_xgmi, ...);
- per InfiniBand device: ``fw_ver`` and ``board_id`` (/sys/class/infiniband);
- ROCm: /opt/rocm/.info/version under the root (inside an image: the image's).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The firmware amdgpu lists in fw_version/ that a fleet should agree on.
FIRMWARE = ("mec_fw_version", "sos_fw_version", "smc_fw_version", "ta_ras_fw_version",
            "ta_xgmi_fw_version", "rlc_fw_version", "sdma_fw_version")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip() or None
    except OSError:
        return None


def node_name(root: Path, environ: Mapping[str, str]) -> str:
    return (environ.get("SLURMD_NODENAME") or _read(root / "proc/sys/kernel/hostname")
            or socket.gethostname())


def _gpus(root: Path) -> list[dict[str, Any]]:
    found = []
    drm = root / "sys/class/drm"
    cards = sorted(drm.glob("card[0-9]*"), key=lambda p: p.name) if drm.is_dir() else []
    for card in cards:
        if "-" in card.name:  # connectors (card0-DP-1) are not devices
            continue
        device = card / "device"
        vendor = _read(device / "vendor")
        if vendor not in ("0x1002", "0x10de"):
            continue
        firmware = {name.replace("_fw_version", ""): value for name in FIRMWARE
                    if (value := _read(device / "fw_version" / name))}
        found.append({"card": card.name, "vendor": "amd" if vendor == "0x1002" else "nvidia",
                      "vbios": _read(device / "vbios_version"), "firmware": firmware})
    return found


def _nics(root: Path) -> list[dict[str, Any]]:
    ib = root / "sys/class/infiniband"
    return [{"device": d.name, "fw_ver": _read(d / "fw_ver"), "board_id": _read(d / "board_id")}
            for d in (sorted(ib.iterdir()) if ib.is_dir() else [])]


def node_facts(root: Path, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    return {"name": node_name(root, environ),
            "kernel": _read(root / "proc/sys/kernel/osrelease"),
            "drivers": {"amdgpu": _read(root / "sys/module/amdgpu/version"),
                        "nvidia": _read(root / "sys/module/nvidia/version")},
            "gpus": _gpus(root), "nics": _nics(root),
            "rocm": _read(root / "opt/rocm/.info/version")}


def fingerprint_keys(facts: Mapping[str, Any]) -> dict[str, str]:
    """The facts as comparable strings: ``kernel``, ``amdgpu``, ``vbios``, ``fw.mec``,
    ``nic_fw``... (a node's GPUs should agree among themselves too: several values are
    joined, sorted)."""
    keys: dict[str, str] = {}
    if facts.get("kernel"):
        keys["kernel"] = str(facts["kernel"])
    for driver, version in (facts.get("drivers") or {}).items():
        if version:
            keys[driver] = str(version)
    gpus = facts.get("gpus") or []
    vbios = sorted({str(g["vbios"]) for g in gpus if g.get("vbios")})
    if vbios:
        keys["vbios"] = ",".join(vbios)
    for name in sorted({n for g in gpus for n in (g.get("firmware") or {})}):
        keys[f"fw.{name}"] = ",".join(sorted({str(g["firmware"][name]) for g in gpus
                                              if name in (g.get("firmware") or {})}))
    nic_fw = sorted({str(n["fw_ver"]) for n in facts.get("nics") or [] if n.get("fw_ver")})
    if nic_fw:
        keys["nic_fw"] = ",".join(nic_fw)
    if facts.get("rocm"):
        keys["rocm"] = str(facts["rocm"])
    return keys
