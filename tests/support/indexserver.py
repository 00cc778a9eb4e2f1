"""The wheel index server (testbed.wheel_index) as a pytest fixture; import it into a
conftest.py (``from tests.support.indexserver import index_server``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.wheel_index import (  # noqa: F401  (re-exported for tests)
    Fault,
    IndexServer,
    LoggedRequest,
    make_wheel,
    sha256_of,
    unused_port_url,
    wheel_filename,
)


@pytest.fixture
def index_server(tmp_path: Path) -> Iterator[IndexServer]:
    """A started IndexServer over an empty ``tmp_path / "index"``."""
    with IndexServer(tmp_path / "index") as server:
        yield server


# --------------------------------------------------------------------------- wheels

_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # zip timestamps: same inputs, same bytes, same sha256
