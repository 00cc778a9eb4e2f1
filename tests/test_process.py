"""The one process runner: streaming, bounded output, missing binaries, interrupts."""

from __future__ import annotations

import os
import time

import pytest

from imagebuild.errors import EngineError
from imagebuild.process import CommandRunner


def test_runner_streams_merged_output_in_order():
    seen = []
    result = CommandRunner().run(["sh", "-c", "echo one; echo two >&2; echo three; exit 3"],
                                 on_line=seen.append)
    assert seen == ["one", "two", "three"]
    assert result.returncode == 3 and result.output == "one\ntwo\nthree"


def test_runner_keeps_a_bounded_tail():
    result = CommandRunner().run(["seq", "1", "100"], keep_lines=3)
    assert result.output == "98\n99\n100"


def test_runner_missing_binary_is_an_engine_error():
    with pytest.raises(EngineError, match="no-such-binary-here: command not found"):
        CommandRunner().run(["no-such-binary-here"])


@pytest.mark.parametrize("spawn", [
    "sleep 60 &",          # same process group, ignores SIGINT (a shell's background job)
    "setsid sleep 60 &",   # own session, like the runc container of a podman RUN step
])
def test_interrupt_stops_the_whole_process_group(spawn):
    pid_file = []

    def on_line(line: str) -> None:
        if line.startswith("child "):
            pid_file.append(int(line.split()[1]))
            raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        # the grandchild ignores nothing special: SIGINT to the group must reach it
        CommandRunner(grace_s=5).run(
            ["sh", "-c", f"{spawn} echo child $!; wait"], on_line=on_line)
    assert time.monotonic() - started < 10
    (grandchild,) = pid_file
    for _ in range(50):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"sleep (pid {grandchild}) survived the interrupt")
