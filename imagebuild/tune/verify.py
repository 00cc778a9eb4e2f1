"""Did the tuning take effect? The comparison of GEMM runs without and with a bundle is
``validate/checks/tune_verify.py`` (the image's ``tuning`` check runs it); see there."""

from imagebuild.validate.checks.tune_verify import (
    NOISE,
    Measurement,
    ProblemComparison,
    Verdict,
    git_version_mismatch,
    ignored_messages,
    judge,
    table,
)

__all__ = ["NOISE", "Measurement", "ProblemComparison", "Verdict", "git_version_mismatch",
           "ignored_messages", "judge", "table"]
