"""kernel-log: GPU errors the kernel logged since boot (or the last N minutes).

Read from /dev/kmsg (Documentation/ABI/testing/dev-kmsg: one record per read(),
``<prefix>,<seq>,<usec since boot>,<flags>;<text>``, the priority's low three bits the log
level), the device dmesg itself reads; in a node tree, the same records as lines of a
file. kernel.dmesg_restrict=1 keeps it from unprivileged users: the item then says so.

Classes, each matched on real driver messages:
- gpu_reset: "GPU reset begin!", "GPU reset(N) failed" (amdgpu_device.c);
- ring_timeout: "ring gfx_0.0.0 timeout, signaled seq=..., emitted seq=..."
  (amdgpu_job.c, amdgpu_job_timedout);
- ras: "uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!", an amdgpu
  device's "[Hardware Error]" (the ACA records of MI300), RAS poison or uncorrectable
  counts (amdgpu_ras.c);
- page_fault: "[gfxhub0] retry page fault", "[mmhub0] no-retry page fault" (gmc_v9_0.c);
- xgmi: amdgpu's XGMI messages at error level ("XGMI: Failed to initialize XGMI session",
  amdgpu_psp.c; "XGMI: Failed to add node", amdgpu_xgmi.c);
- nvidia_xid: "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus", and the
  newer drivers' "has fallen off the bus" without an Xid;
- amdgpu_error: any other amdgpu record at error level or worse.
Records at info level that only mention RAS ("RAS: optional ras ta ucode is not
available") are not errors.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..doctor.finding import Finding, failed, passed, warned
from ..doctor.node import Node

ITEM = "kernel-log"
ERROR_LEVEL = 3  # KERN_ERR

_CLASSES = (
    ("gpu_reset", re.compile(r"GPU reset begin|GPU reset\(\d+\) failed|GPU reset failed")),
    ("ring_timeout", re.compile(r"\bring \S+ timeout\b")),
    ("ras", re.compile(r"uncorrectable hardware error|amdgpu.*\[Hardware Error\]|"
                       r"RAS.*(?:uncorrectable|poison)|poison consumption", re.IGNORECASE)),
    ("page_fault", re.compile(r"\[(?:gfx|mm)hub\d*\] (?:retry |no-retry )?page fault")),
    ("nvidia_xid", re.compile(r"NVRM: Xid \(PCI:[0-9A-Fa-f:.]+\): \d+|fallen off the bus")),
)
_XGMI = re.compile(r"xgmi", re.IGNORECASE)


@dataclass(frozen=True)
class Record:
    level: int
    seconds: float  # since boot
    text: str


@dataclass(frozen=True)
class Hit:
    kind: str
    record: Record


def parse_record(raw: str) -> Record | None:
    head, sep, text = raw.partition(";")
    fields = head.split(",")
    if not sep or len(fields) < 3 or not fields[0].isdigit() or not fields[2].isdigit():
        return None
    # Continuation lines (" KEY=value" dictionary lines) follow a record's text.
    return Record(int(fields[0]) & 7, int(fields[2]) / 1e6, text.split("\n", 1)[0].rstrip())


def read_kmsg(path: Path) -> tuple[list[Record], str | None]:
    """The kernel's records, and why none could be read (None when they could)."""
    try:
        is_device = stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return [], f"no {path}"
    if not is_device:  # a node tree's copy
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            return [], f"cannot read {path}: {exc.strerror}"
        return [r for r in map(parse_record, text.splitlines()) if r], None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            return [], (f"{path} is not readable by this user (kernel.dmesg_restrict=1 "
                        "keeps the kernel log from unprivileged users)")
        return [], f"cannot open {path}: {exc.strerror}"
    records: list[Record] = []
    try:
        while True:
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the ring buffer overwrote a record: skip it
                    continue
                raise
            if not chunk:
                break
            record = parse_record(chunk.decode(errors="replace"))
            if record:
                records.append(record)
    finally:
        os.close(fd)
    return records, None


def classify(record: Record) -> str | None:
    for kind, pattern in _CLASSES:
        if pattern.search(record.text):
            return kind
    amdgpu = "amdgpu" in record.text
    if amdgpu and _XGMI.search(record.text) and record.level <= ERROR_LEVEL:
        return "xgmi"
    if amdgpu and record.level <= ERROR_LEVEL:
        return "amdgpu_error"
    return None


def uptime_s(node: Node) -> float | None:
    text = node.read("/proc/uptime")
    try:
        return float(text.split()[0]) if text else None
    except ValueError:
        return None


def hits(records: list[Record], since_s: float | None = None) -> list[Hit]:
    return [Hit(kind, r) for r in records
            if (since_s is None or r.seconds >= since_s) and (kind := classify(r))]


def check(node: Node, minutes: float | None = None) -> Finding:
    records, problem = read_kmsg(node.path("/dev/kmsg"))
    if problem:
        return warned(ITEM, f"kernel log not read: {problem}", "run the screen as a user "
                      "who may read the kernel log, or ask the site to scan it (the GPU "
                      "errors it holds are not checked)")
    window = "since boot"
    since = None
    if minutes is not None:
        now = uptime_s(node)
        since = (now - minutes * 60) if now is not None else None
        window = f"in the last {minutes:g} minutes"
    found = hits(records, since)
    if not found:
        return passed(ITEM, f"no GPU error in the kernel log {window} ({len(records)} records)")
    counts: dict[str, int] = {}
    for hit in found:
        counts[hit.kind] = counts.get(hit.kind, 0) + 1
    first = found[0].record
    summary = ", ".join(f"{kind} x{n}" for kind, n in counts.items())
    return failed(ITEM, f"{len(found)} GPU error(s) in the kernel log {window}: {summary}; "
                  f"first at {first.seconds:.0f} s after boot: {first.text[:160]}",
                  "drain the node and have the GPU checked (rebooting clears the log, "
                  "not the fault)")
