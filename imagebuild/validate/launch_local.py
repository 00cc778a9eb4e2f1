"""``--launcher local``: the checks in this Python environment, as a child process."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from imagebuild.inimage.library_dirs import newest_dir
from imagebuild.validate.events import EventStream, stream_command
from imagebuild.validate.invocation import Invocation

#: The checkout (or installed tree) whose imagebuild.inimage the child imports.
_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def local_env(invocation: Invocation, environ: dict[str, str]) -> dict[str, str]:
    """The child's environment: the invocation's defaults (the site's), then this
    process's own environment (what the user exported wins), the checks importable."""
    env = {**invocation.env, **environ}
    if invocation.library_dir:
        directory = newest_dir(invocation.library_dir) or invocation.library_dir
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (directory, env.get("LD_LIBRARY_PATH", "")) if p)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_SOURCE_ROOT), env.get("PYTHONPATH", ""))
                                        if p)
    return env


def run_local(invocation: Invocation, stream: EventStream, runner: Any = None) -> int:
    argv = [sys.executable, "-m", "imagebuild.inimage", *invocation.runner_args,
            "--events", "--report", "-"]
    return stream_command(argv, stream, local_env(invocation, dict(os.environ)), runner)
