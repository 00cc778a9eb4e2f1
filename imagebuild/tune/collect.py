"""Turn what the tuner left in its output directory into a tuning bundle: the code is
``validate/checks/tune_gemm.py`` (``bundle_from_run``), which runs in images; here its
errors are TuneErrors."""

from __future__ import annotations

from imagebuild.validate.checks import tune_gemm
from imagebuild.validate.checks.tune_gemm import TUNABLEOP_FILENAME

from .problem import host_errors

bundle_from_run = host_errors(tune_gemm.bundle_from_run)

__all__ = ["TUNABLEOP_FILENAME", "bundle_from_run"]
