"""Did the tuning take effect? Compare GEMM runs without and with a bundle.

A bundle is in effect when (1) no library said it ignored the file, (2) at least one
problem ran a different kernel (solution index) or got measurably faster, and (3) no
problem got slower beyond noise: a tuned kernel that loses to the default is a failure,
named with both timings.

Noise, per problem: each side is timed ``repeats`` times (the median is its time); the
relative spread of those repeats, (max - min) / median, is how far that run's timings
wander, so a change is beyond noise only when it exceeds the larger spread of the two
sides, and never less than NOISE (3 %, the run-to-run variation of a GEMM timing). Libraries that
ignore a file: TunableOp warns ``Failed validator: <KEY>`` and drops the whole file
(pytorch/pytorch aten/src/ATen/cuda/tunable/Tunable.cpp); hipBLASLt 6.4-7.x turns the
override off without a message when the file's ``Git Version`` differs from the library's
(library/src/amd_detail/hipblaslt.cpp), so its first line is compared here too, and the
bench's own "not the same" message is caught.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..taf import DEFINITION, taf
from .problems import GemmProblem

_IGNORED = (
    (re.compile(r"Failed validator:?\s*(?P<what>\S+)"), ("TunableOp ignored its results file: "
                                                 "validator {what} differs")),
    (re.compile(r"(?i)git version.*not the same|not the same.*git version"),
     "hipBLASLt: the tuning file's Git Version is not this library's"),
    (re.compile(r"(?i)(?:could not|cannot|failed to|unable to) (?:open|read|load).*"
                r"(?:tunableop|override|tuning)"), "a tuning file could not be read"),
)

#: A speed-up this small is within run-to-run noise of a GEMM timing (a few per cent).
NOISE = 0.03


@dataclass(frozen=True)
class Measurement:
    us: float
    solution: str | None = None  # kernel or solution index that ran, when known
    samples: tuple[float, ...] = ()  # the repeated timings (us) whose median is ``us``

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeated timings; 0 with fewer than two."""
        if len(self.samples) < 2 or self.us <= 0:
            return 0.0
        return (max(self.samples) - min(self.samples)) / self.us


@dataclass(frozen=True)
class ProblemComparison:
    problem: GemmProblem
    before: Measurement
    after: Measurement

    @property
    def tflops_before(self) -> float:
        return self.problem.flops / self.before.us / 1e6

    @property
    def tflops_after(self) -> float:
        return self.problem.flops / self.after.us / 1e6

    @property
    def speedup(self) -> float:
        return self.before.us / self.after.us

    @property
    def noise(self) -> float:
        """Relative change this problem's timings cannot tell from noise."""
        return max(NOISE, self.before.spread, self.after.spread)

    @property
    def slower(self) -> bool:
        return self.after.us > self.before.us * (1 + self.noise)

    @property
    def faster(self) -> bool:
        return self.before.us > self.after.us * (1 + self.noise)

    @property
    def kernel_changed(self) -> bool | None:
        if self.before.solution is None or self.after.solution is None:
            return None
        return self.before.solution != self.after.solution


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reasons: tuple[str, ...]
    rows: tuple[ProblemComparison, ...]


def ignored_messages(output: str) -> list[str]:
    """What the libraries printed about ignoring a tuning file, one line each."""
    found: list[str] = []
    for line in output.splitlines():
        for pattern, message in _IGNORED:
            if match := pattern.search(line):
                text = message.format(what=match.groupdict().get("what", ""))
                if text not in found:
                    found.append(text)
    return found


def git_version_mismatch(override_first_line: str, library_git_version: str) -> str | None:
    """hipBLASLt's own rule: the text after ``Git Version: `` equals the library's revision."""
    header = "Git Version: "
    position = override_first_line.find(header)
    file_version = override_first_line[position + len(header):].strip() if position >= 0 \
        else None
    if file_version == library_git_version.strip():
        return None
    return (f"override file says Git Version {file_version!r}, the library is "
            f"{library_git_version.strip()!r}: hipBLASLt ignores the whole file")


def judge(rows: list[ProblemComparison], output: str = "",
          override_check: str | None = None, more_reasons: Sequence[str] = ()) -> Verdict:
    """In effect, or every reason it is not: what the libraries printed (``output``), the
    override file's Git Version (``override_check``), the caller's own findings, then the
    kernels and times of ``rows``."""
    reasons = ignored_messages(output)
    if override_check:
        reasons.append(override_check)
    reasons += [reason for reason in more_reasons if reason not in reasons]
    if not rows:
        reasons.append("no problem was measured")
    changed = [r for r in rows if r.kernel_changed]
    faster = [r for r in rows if r.faster]
    known = [r for r in rows if r.kernel_changed is not None]
    if rows and known and not changed:
        reasons.append(f"no problem changed its kernel ({len(known)} compared): the tuning "
                       "was not applied")
    elif rows and not known and not faster:
        reasons.append("no problem got faster beyond noise (at least "
                       f"{NOISE:.0%}) and the kernels that ran are not known")
    for r in rows:
        if r.slower:
            reasons.append(f"{r.problem.label()} is slower with the tuning: "
                           f"{r.before.us:.1f} us -> {r.after.us:.1f} us "
                           f"(+{r.after.us / r.before.us - 1:.1%}, beyond the noise of "
                           f"{r.noise:.1%} of its repeated timings)")
    return Verdict(not reasons, tuple(reasons), tuple(rows))


def taf_figures(rows: Sequence[ProblemComparison]) -> dict[str, object]:
    """The bundle's problems as one TAF-style figure each side (taf.py: FLOP-weighted
    harmonic mean, each problem once), and the best problem each side."""
    if not rows:
        return {"taf_definition": DEFINITION}
    before = taf((r.problem.flops, r.tflops_before) for r in rows)
    after = taf((r.problem.flops, r.tflops_after) for r in rows)
    best_before = max(rows, key=lambda r: r.tflops_before)
    best_after = max(rows, key=lambda r: r.tflops_after)
    return {"taf_tflops_before": round(before, 4) if before else None,
            "taf_tflops_after": round(after, 4) if after else None,
            "taf_problems": len(rows),
            "best_problem_before": {"problem": best_before.problem.label(),
                                    "tflops": round(best_before.tflops_before, 4)},
            "best_problem_after": {"problem": best_after.problem.label(),
                                   "tflops": round(best_after.tflops_after, 4)},
            "taf_definition": DEFINITION}


def table(verdict: Verdict) -> list[str]:
    """Human lines: one per problem with TFLOP/s without and with the tuning, then the
    TAF-style figure of all of them without and with it."""
    lines = [f"{'problem':44} {'TFLOP/s before':>15} {'after':>8} {'speed-up':>9} kernel"]
    for r in verdict.rows:
        kernel = {None: "?", True: "changed", False: "same"}[r.kernel_changed]
        lines.append(f"{r.problem.label():44} {r.tflops_before:15.1f} {r.tflops_after:8.1f} "
                     f"{r.speedup:8.2f}x {kernel}" + ("  SLOWER" if r.slower else ""))
    summary = taf_figures(verdict.rows)
    if summary.get("taf_tflops_before") and summary.get("taf_tflops_after"):
        best = summary["best_problem_after"]
        assert isinstance(best, dict)
        lines.append(f"TAF-style over {summary['taf_problems']} problems: "
                     f"{summary['taf_tflops_before']:.1f} -> {summary['taf_tflops_after']:.1f} "
                     f"TFLOP/s (FLOP-weighted harmonic mean; best problem with the tuning "
                     f"{best['tflops']:.1f})")
    lines.append("tuning in effect" if verdict.ok else "tuning NOT in effect: "
                 + "; ".join(verdict.reasons))
    return lines
