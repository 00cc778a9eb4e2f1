"""One doctor item's verdict: pass, warn, fail or skip, a one-line reason and the fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
STATUSES = (PASS, WARN, FAIL, SKIP)


@dataclass(frozen=True)
class Finding:
    item: str  # e.g. "driver", "gfx", "libfabric"
    status: str  # one of STATUSES
    reason: str  # one line: what was found
    fix: str = ""  # one line, for warn and fail: what to do

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def passed(item: str, reason: str) -> Finding:
    return Finding(item, PASS, reason)


def warned(item: str, reason: str, fix: str) -> Finding:
    return Finding(item, WARN, reason, fix)


def failed(item: str, reason: str, fix: str) -> Finding:
    return Finding(item, FAIL, reason, fix)


def skipped(item: str, reason: str) -> Finding:
    return Finding(item, SKIP, reason)


def exit_code(findings: list[Finding]) -> int:
    """1 when any item failed, else 0 (warnings do not stop a job)."""
    return 1 if any(f.status == FAIL for f in findings) else 0


def report(findings: list[Finding], context: dict[str, Any]) -> dict[str, Any]:
    """The JSON document: the context (image, node, root) and one entry per item."""
    counts = {status: sum(f.status == status for f in findings) for status in STATUSES}
    return {"schema": 1, "tool": "imagebuild doctor", **context,
            "ok": exit_code(findings) == 0, "counts": counts,
            "findings": [f.to_json() for f in findings]}
