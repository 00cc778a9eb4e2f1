"""In-image validation checks: the standard library and torch only (so they run in any image, on any launcher).

This package is copied into every image (see ``imagebuild.validate.bundle``) and runs
there as ``python3 -m imagebuild_checks``, where imagebuild itself is not installed. From
a source checkout it runs as ``python -m imagebuild.validate.checks``. Both accept the
same flags and print the same table and JSON report.

Nothing in this package may import anything outside the standard library and torch
(not yaml, not rich, not imagebuild): a test enforces it. Imports are relative so the
directory works under any package name.
"""

#: Version of the JSON report written by the runner (docs/validate-report.md).
REPORT_SCHEMA = "imagebuild-validate-report/1"

#: Every check, in the order the runner runs them (the train step last: it takes the most
#: memory and the longest; the environment first: it explains the failures after it).
CHECK_NAMES = (
    "environment",
    "devices",
    "gemm",
    "hipblaslt",
    "tuning",
    "attention",
    "collectives",
    "network",
    "train",
)
