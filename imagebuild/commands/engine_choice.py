"""The one way a command opens its container engine, saying so when ``auto`` passed Docker
over: podman then starts from a cold cache and holds other images, which a user of Docker
must not learn from a cold rebuild or a "no image" error."""

from __future__ import annotations

import sys
from typing import Any

from imagebuild.engine.base import Engine
from imagebuild.engine.select import open_engine, selection_line


def open_engine_saying(backend: str | None = None, **options: Any) -> Engine:
    """``imagebuild.engine.select.open_engine``, and on stderr why the engine it opened is
    not the preferred one (``docker not used: ...; using podman ...``)."""
    engine = open_engine(backend, **options)
    line = selection_line(engine)
    if line:
        print(f"imagebuild: {line}", file=sys.stderr, flush=True)
    return engine
