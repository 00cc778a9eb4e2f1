"""Suite-wide rules.

An integration test (marked ``integration``) needs a real component: a Docker engine, a
registry, squashfs tools, a compiler, SLURM, enroot. Outside CI a test may skip, with the
reason, when its component is missing. With ``IMAGEBUILD_REQUIRE_INTEGRATION=1`` (set by
``scripts/test-all``, which CI runs) every skip is turned into a failure: a green run with
tests skipped is impossible. GPU tests are deselected (``-m "not gpu"``), not skipped.
"""

from __future__ import annotations

import os

import pytest

REQUIRE_ENV = "IMAGEBUILD_REQUIRE_INTEGRATION"


def integration_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and integration_required()):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped while {REQUIRE_ENV}=1 (CI): {reason}\n"
        "hint: .ci/setup-system.sh installs and starts every component the suite needs"
    )
