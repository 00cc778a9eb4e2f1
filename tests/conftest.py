"""Suite-wide rules.

An integration test (marked ``integration``) needs a real component: a Docker engine, a
registry, squashfs tools, a compiler, SLURM, enroot. Outside CI a test may skip, with the
reason, when its component is missing. With ``IMAGEBUILD_REQUIRE_INTEGRATION=1`` (set by
``scripts/test-all``, which CI runs) every skip is turned into a failure: a green run with
tests skipped is impossible. GPU tests are deselected (``-m "not gpu"``), not skipped.

The suite also keeps its own disk footprint bounded (tests/support/disk_hygiene.py): a
module's temporary folders go when it passes, and the engine's test images when it grows
past a budget.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import docker
import docker.errors
import pytest

from tests.support import disk_hygiene

REQUIRE_ENV = "IMAGEBUILD_REQUIRE_INTEGRATION"


def integration_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        _FAILED_MODULES.add(item.nodeid.split("::")[0])
    if not (report.skipped and integration_required()):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"skipped while {REQUIRE_ENV}=1 (CI): {reason}\n"
        "hint: .ci/setup-system.sh installs and starts every component the suite needs"
    )
    _FAILED_MODULES.add(item.nodeid.split("::")[0])


# --------------------------------------------------------------------------------------
# disk hygiene: which temporary folders a module made, and at which fixture scope
# --------------------------------------------------------------------------------------

_FAILED_MODULES: set[str] = set()
_SCOPES: list[str] = []                 # scopes of the fixtures being set up, innermost last
_MADE: list[tuple[Path, str]] = []      # every mktemp folder with the scope that made it
_RECLAIMED: list[int] = []              # bytes the engine gave back, one entry per reclaim


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest
                         ) -> Generator[None, object, object]:
    _SCOPES.append(fixturedef.scope)
    try:
        return (yield)
    finally:
        _SCOPES.pop()


def pytest_configure(config: pytest.Config) -> None:
    original = pytest.TempPathFactory.mktemp

    def recorded_mktemp(self: pytest.TempPathFactory, basename: str,
                        numbered: bool = True) -> Path:
        path = original(self, basename, numbered)
        _MADE.append((path, _SCOPES[-1] if _SCOPES else "function"))
        return path

    pytest.TempPathFactory.mktemp = recorded_mktemp  # type: ignore[method-assign]


def _module_items(request: pytest.FixtureRequest) -> list[pytest.Item]:
    return [item for item in request.session.items
            if item.getparent(pytest.Module) is request.node]


@pytest.fixture(autouse=True, scope="module")
def _module_disk_hygiene(request: pytest.FixtureRequest) -> Iterator[None]:
    first = len(_MADE)
    yield
    if request.node.nodeid not in _FAILED_MODULES:
        disk_hygiene.remove_folders([path for path, scope in _MADE[first:]
                                     if scope not in ("session", "package")])
    if not any("docker_engine" in getattr(item, "fixturenames", ()) for item in _module_items(request)):
        return
    try:
        client = docker.from_env()
        if disk_hygiene.docker_footprint(client) > disk_hygiene.engine_budget_bytes():
            _RECLAIMED.append(disk_hygiene.reclaim_docker(client))
    except docker.errors.DockerException:
        return  # no engine here: the module's own tests said so


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if _RECLAIMED:
        terminalreporter.write_line(
            f"disk hygiene: the engine's test images were removed {len(_RECLAIMED)} times "
            f"(budget {disk_hygiene.engine_budget_bytes() / disk_hygiene.GIB:.0f} GiB), "
            f"{sum(_RECLAIMED) / disk_hygiene.GIB:.1f} GiB given back")
