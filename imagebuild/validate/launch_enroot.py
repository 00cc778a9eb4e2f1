"""``--launcher enroot``: the checks in a .sqsh through enroot, which passes the host's
GPUs through its hooks."""

from __future__ import annotations

import os
from typing import Any

from imagebuild.errors import EngineError
from imagebuild.validate.events import EventStream, stream_command
from imagebuild.validate.invocation import (
    Invocation,
    container_command,
    container_env,
    container_mounts,
)
from imagebuild.validate.target import Target


def enroot_argvs(target: Target, invocation: Invocation, name: str,
                 binary: str = "enroot") -> tuple[list[str], list[str], list[str]]:
    """(create, start, remove) command lines."""
    start = [binary, "start"]
    for key, value in sorted(container_env(invocation).items()):
        start += ["--env", f"{key}={value}"]
    for bind in container_mounts(invocation):
        start += ["--mount", f"{bind.source}:{bind.target}"]
    start += [name, *container_command(invocation)]
    return ([binary, "create", "--force", "--name", name, str(target.ref)], start,
            [binary, "remove", "--force", name])


def run_enroot(target: Target, invocation: Invocation, stream: EventStream,
               runner: Any = None) -> int:
    name = f"imagebuild-validate-{os.getpid()}"
    create, start, remove = enroot_argvs(target, invocation, name)
    if stream_command(create, stream, None, runner) != 0:
        raise EngineError(f"enroot create {target.ref} failed: "
                          + (stream.tail[-1] if stream.tail else "no output"))
    try:
        return stream_command(start, stream, None, runner)
    finally:
        stream_command(remove, EventStream(), None, runner)
