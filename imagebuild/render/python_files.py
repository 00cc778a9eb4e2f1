"""The python stage's inputs from the lock: the wheels as a PEP 751 file and the ROCm
selector's exact sdist. Only wheels, so a change to a git commit or the base digest leaves
them, and so the python stage's cache, untouched."""

from __future__ import annotations

from typing import Any

import tomli_w

from imagebuild.errors import short_path
from imagebuild.lock.model import Lock


def selector_requirement(lock: Lock) -> str:
    """``rocm @ <url> --hash=sha256:<hex>``: the sdist's exact bytes, nothing resolved."""
    assert lock.selector is not None
    return (f"{lock.selector.name} @ {lock.selector.url} "
            f"--hash=sha256:{lock.selector.sha256}\n")


def python_lock(lock: Lock) -> str:
    """The Python part of the lock as a standalone PEP 751 file for the python stage.

    Only wheels: a change to a git commit or the base digest leaves this file, and so the
    python stage's cache, untouched.
    """
    packages = []
    for wheel in lock.wheels:
        entry: dict[str, Any] = {"url": wheel.url, "hashes": {"sha256": wheel.sha256}}
        if wheel.size is not None:
            entry["size"] = wheel.size
        packages.append({"name": wheel.name, "version": wheel.version, "wheels": [entry]})
    document = {
        "lock-version": "1.0",
        "created-by": "imagebuild",
        "requires-python": f"=={lock.python}.*",
        "packages": packages,
    }
    return (f"# The wheels of {short_path(lock.path)}, staged by imagebuild for the python "
            "stage.\n" + tomli_w.dumps(document))
