"""Where this package lies, for the subprocesses it starts (spawned ranks, GPU probes):
the directory to put on PYTHONPATH so that ``python -m <this package>`` works, whether it
is imagebuild.inimage in a checkout or imagebuild_checks in an image."""

from __future__ import annotations

from pathlib import Path


def package_root() -> Path:
    root = Path(__file__).resolve().parent
    for _ in range(__package__.count(".") + 1):
        root = root.parent
    return root
