"""The outcome of one check: passed, failed or skipped, always with a one-line reason.

A check never passes silently: every result says what was verified (passed), what was
wrong with measured and expected numbers (failed), or why it could not run (skipped, with
a cause that decides whether the skip makes the run incomplete).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

PASSED = "passed"
FAILED = "failed"
SKIPPED = "skipped"
STATUSES = (PASSED, FAILED, SKIPPED)

#: Why a check was skipped. NO_GPU: it needs a GPU and none is visible (the run fails
#: unless --allow-cpu). INCOMPLETE: it should have run but could not be judged, e.g. a
#: GPU missing from the peak table (the run fails). NOT_APPLICABLE: it has nothing to
#: check here, e.g. hipBLASLt on NVIDIA or collectives with one rank (the run may pass).
NO_GPU = "no_gpu"
INCOMPLETE = "incomplete"
NOT_APPLICABLE = "not_applicable"
SKIP_CAUSES = (NO_GPU, INCOMPLETE, NOT_APPLICABLE)


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    reason: str
    figures: Mapping[str, Any] = field(default_factory=dict)
    cause: str | None = None
    details: tuple[str, ...] = ()
    duration_s: float = 0.0

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.name}: status {self.status!r} is not one of {STATUSES}")
        if not self.reason.strip():
            raise ValueError(f"check {self.name}: a result needs a reason (no silent pass)")
        if self.status == SKIPPED and self.cause not in SKIP_CAUSES:
            raise ValueError(f"check {self.name}: a skip needs a cause from {SKIP_CAUSES}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "cause": self.cause,
            "figures": dict(self.figures),
            "details": list(self.details),
            "duration_s": round(self.duration_s, 3),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckResult:
        return cls(
            name=data["name"], status=data["status"], reason=data["reason"],
            figures=dict(data.get("figures") or {}), cause=data.get("cause"),
            details=tuple(data.get("details") or ()), duration_s=float(data.get("duration_s", 0.0)),
        )

    def with_duration(self, seconds: float) -> CheckResult:
        return replace(self, duration_s=seconds)


def passed(name: str, reason: str, figures: Mapping[str, Any] | None = None,
           details: Sequence[str] = ()) -> CheckResult:
    return CheckResult(name, PASSED, reason, dict(figures or {}), None, tuple(details))


def failed(name: str, reason: str, figures: Mapping[str, Any] | None = None,
           details: Sequence[str] = ()) -> CheckResult:
    return CheckResult(name, FAILED, reason, dict(figures or {}), None, tuple(details))


def skipped(name: str, cause: str, reason: str, figures: Mapping[str, Any] | None = None,
            details: Sequence[str] = ()) -> CheckResult:
    return CheckResult(name, SKIPPED, reason, dict(figures or {}), cause, tuple(details))


def judge(name: str, problems: Sequence[str], ok_reason: str, figures: Mapping[str, Any],
          details: Sequence[str] = ()) -> CheckResult:
    """Failed with every problem joined into the reason, or passed with ``ok_reason``."""
    if problems:
        return failed(name, "; ".join(problems), figures, details)
    return passed(name, ok_reason, figures, details)


def below_minimum(what: str, measured: float, minimum: float, unit: str = "",
                  context: str = "") -> str | None:
    """The failure line for a measured value under its threshold, or None when it is fine."""
    if measured >= minimum:
        return None
    suffix = f" ({context})" if context else ""
    return f"{what} {_fmt(measured)}{unit}, expected >= {_fmt(minimum)}{unit}{suffix}"


def above_maximum(what: str, measured: float, maximum: float, unit: str = "",
                  context: str = "") -> str | None:
    if measured <= maximum:
        return None
    suffix = f" ({context})" if context else ""
    return f"{what} {_fmt(measured)}{unit}, expected <= {_fmt(maximum)}{unit}{suffix}"


def _fmt(value: float) -> str:
    if value == 0 or abs(value) >= 10:
        return f"{value:.1f}"
    if abs(value) >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def merge_ranks(results: Sequence[CheckResult], hosts: Sequence[str]) -> CheckResult:
    """One result from the per-rank results of a check that every rank runs on its own GPU.

    Failed when any rank failed (the reason names the ranks), passed when any rank passed
    and none failed, skipped when every rank skipped. Rank 0's figures stay on top; each
    rank's figures are kept under ``per_rank`` when there is more than one rank.
    """
    first = results[0]
    failing = [(i, r) for i, r in enumerate(results) if r.status == FAILED]
    duration = max(r.duration_s for r in results)
    figures = dict(first.figures)
    if len(results) > 1:
        figures["per_rank"] = [
            {"rank": i, "host": hosts[i] if i < len(hosts) else None, "status": r.status,
             "reason": r.reason, **dict(r.figures)} for i, r in enumerate(results)]
    if failing:
        if len(results) == 1:
            return replace(failing[0][1], figures=figures, duration_s=duration)
        parts = [f"rank {i} ({hosts[i] if i < len(hosts) else '?'}): {r.reason}"
                 for i, r in failing[:4]]
        if len(failing) > 4:
            parts.append(f"and {len(failing) - 4} more ranks")
        details = tuple(d for _, r in failing for d in r.details)
        return CheckResult(first.name, FAILED, "; ".join(parts), figures, None, details, duration)
    passing = [r for r in results if r.status == PASSED]
    if passing:
        reason = passing[0].reason
        if len(results) > 1:
            skips = len(results) - len(passing)
            tally = f"passed on {len(passing)} ranks" + (f", skipped on {skips}" if skips else "")
            reason = f"{reason} ({tally})"
        return CheckResult(first.name, PASSED, reason, figures, None, passing[0].details, duration)
    return CheckResult(first.name, SKIPPED, first.reason, figures, first.cause, first.details,
                       duration)


def merge_global(results: Sequence[CheckResult], hosts: Sequence[str]) -> CheckResult:
    """For checks whose figures are already job-wide (collectives, train): rank 0's result,
    unless another rank failed (then that rank's reason joins rank 0's)."""
    first = results[0]
    duration = max(r.duration_s for r in results)
    others = [(i, r) for i, r in enumerate(results[1:], start=1) if r.status == FAILED]
    if not others:
        return replace(first, duration_s=duration)
    parts = [] if first.status != FAILED else [f"rank 0: {first.reason}"]
    parts += [f"rank {i} ({hosts[i] if i < len(hosts) else '?'}): {r.reason}"
              for i, r in others[:4]]
    details = first.details + tuple(d for _, r in others for d in r.details)
    return CheckResult(first.name, FAILED, "; ".join(parts), first.figures, None, details, duration)
