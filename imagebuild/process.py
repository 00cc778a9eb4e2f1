"""The one runner for every external process imagebuild starts.

Three ways to run a command, one policy for all of them:

- ``run``: stdout and stderr merged, each line streamed to a callback (builds, pushes);
- ``capture``: stdout kept apart from stderr (``uv pip compile``, ``git ls-remote``,
  ``siftool``, probes), with an optional timeout;
- ``spawn``: a child wired into a pipeline (``docker export | tar2sqfs``), as a context
  manager that stops it on any exception.

Every child runs in its own session, so a terminal Ctrl-C reaches only imagebuild; on
KeyboardInterrupt (or any exception) the child's whole process group is stopped: SIGINT
first (the docker and podman clients then cancel the build in the daemon), SIGTERM after a
grace period, SIGKILL last. ``check`` turns a non-zero exit into one ``CommandFailed`` that
names the step and carries the tail of the command's output.

Unit tests replace a ``CommandRunner`` at this seam; integration tests use the real tools.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from imagebuild.errors import CommandFailed, EngineError

LineCallback = Callable[[str], None]
#: Lines of output a ``CommandFailed`` carries.
TAIL_LINES = 20


@dataclass(frozen=True)
class Captured:
    """A finished command whose stdout and stderr were kept apart."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def tail(self, lines: int = TAIL_LINES) -> str:
        text = (self.stderr.strip() or self.stdout.strip())
        return "\n".join(text.splitlines()[-lines:])



@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    #: stdout and stderr merged, in order (only the last ``keep_lines`` lines if bounded).
    output: str


class CommandRunner:
    """Runs a command with stdout+stderr merged, streaming each line to a callback.

    The child runs in its own session, so a terminal Ctrl-C reaches only this process; on
    KeyboardInterrupt (or any exception while streaming) the child's whole process group is
    stopped: SIGINT first (the docker and podman clients then cancel the build in the
    daemon), SIGTERM after ``grace_s``, SIGKILL last. The exception is then re-raised.
    """

    def __init__(self, grace_s: float = 10.0):
        self.grace_s = grace_s

    def run(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
            cwd: Path | None = None, on_line: LineCallback | None = None,
            keep_lines: int | None = None) -> CommandResult:
        argv = tuple(str(a) for a in argv)
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, env=dict(env) if env is not None else None,
                cwd=cwd, start_new_session=True, text=True, errors="replace", bufsize=1,
            )
        except FileNotFoundError as exc:
            raise EngineError(f"{argv[0]}: command not found") from exc
        except PermissionError as exc:
            raise EngineError(f"{argv[0]}: not executable ({exc.strerror})") from exc
        lines: deque[str] = deque(maxlen=keep_lines)
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.rstrip("\r\n")
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            returncode = proc.wait()
        except BaseException:
            self._stop(proc)
            raise
        finally:
            if proc.stdout is not None:
                proc.stdout.close()
        return CommandResult(argv, returncode, "\n".join(lines))

    def check(self, argv: Sequence[str], *, step: str, hint: str = "",
              **kwargs: Any) -> CommandResult:
        """``run``, raising ``CommandFailed`` (step, exit code, output tail) on failure."""
        result = self.run(argv, keep_lines=kwargs.pop("keep_lines", TAIL_LINES), **kwargs)
        if result.returncode != 0:
            raise CommandFailed(step, result.argv, result.returncode, result.output, hint=hint)
        return result

    def capture(self, argv: Sequence[str], *, step: str, env: Mapping[str, str] | None = None,
                cwd: Path | None = None, timeout: float | None = None,
                input: str | bytes | None = None, text: bool = True, check: bool = True,
                hint: str = "") -> Captured:
        """Run to completion with stdout apart from stderr. ``check``: a non-zero exit (or
        the timeout) raises ``CommandFailed`` naming ``step``."""
        argv = tuple(str(a) for a in argv)
        proc = self._popen(argv, env=env, cwd=cwd, text=text,
                           stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            self._stop(proc)
            proc.communicate()
            raise CommandFailed(step, argv, None, f"timed out after {timeout:g} s",
                                hint=hint) from None
        except BaseException:
            self._stop(proc)
            raise
        if not text:
            out_s, err_s = out.decode(errors="replace"), err.decode(errors="replace")
        else:
            out_s, err_s = out, err
        captured = Captured(argv, proc.returncode, out_s, err_s)
        if check and proc.returncode != 0:
            raise CommandFailed(step, argv, proc.returncode, captured.tail(), hint=hint)
        return captured

    @contextmanager
    def spawn(self, argv: Sequence[str], *, stdin: int | IO[Any] | None = subprocess.DEVNULL,
              stdout: int | IO[Any] | None = subprocess.PIPE,
              stderr: int | IO[Any] | None = subprocess.PIPE,
              env: Mapping[str, str] | None = None,
              cwd: Path | None = None) -> Iterator[subprocess.Popen]:
        """A child for a pipeline. Leaving the block normally waits for it; an exception
        (Ctrl-C included) stops its process group first."""
        proc = self._popen(tuple(str(a) for a in argv), env=env, cwd=cwd, text=False,
                           stdin=stdin, stdout=stdout, stderr=stderr)
        try:
            yield proc
        except BaseException:
            self._stop(proc)
            raise
        finally:
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    try:
                        stream.close()
                    except OSError:
                        pass
        proc.wait()

    @staticmethod
    def _popen(argv: tuple[str, ...], *, env: Mapping[str, str] | None, cwd: Path | None,
               text: bool, **streams: Any) -> subprocess.Popen:
        try:
            return subprocess.Popen(argv, env=dict(env) if env is not None else None,
                                    cwd=cwd, start_new_session=True, text=text,
                                    errors="replace" if text else None, **streams)
        except FileNotFoundError as exc:
            raise EngineError(f"{argv[0]}: command not found") from exc
        except PermissionError as exc:
            raise EngineError(f"{argv[0]}: not executable ({exc.strerror})") from exc

    def _stop(self, proc: subprocess.Popen) -> None:
        # Remember every descendant first: podman's RUN containers are started by runc in
        # their own session as a pid-namespace init, which ignores SIGINT/SIGTERM and
        # outlives an interrupted `podman build` (measured: podman 4.3 / buildah 1.28).
        # Killing those first lets podman see its RUN step fail and clean up its working
        # containers itself; signalled first, it exits and leaks them.
        descendants = _descendants(proc.pid)
        escaped = [p for p in descendants if p.group() != proc.pid]
        if escaped:
            for process in escaped:
                process.signal(signal.SIGKILL)
            try:
                proc.wait(timeout=self.grace_s)
            except subprocess.TimeoutExpired:
                pass
        self._stop_group(proc)
        survivors = [p for p in descendants if p.alive()]
        for process in survivors:
            process.signal(signal.SIGKILL)

    def _stop_group(self, proc: subprocess.Popen) -> None:
        for sig, wait_s in ((signal.SIGINT, self.grace_s), (signal.SIGTERM, self.grace_s),
                            (signal.SIGKILL, None)):
            if not _signal_group(proc.pid, sig):
                return
            try:
                proc.wait(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader is gone; members that ignore SIGINT (a shell's background jobs do)
        # would outlive it: end them too.
        if _signal_group(proc.pid, signal.SIGTERM):
            time.sleep(0.2)
            _signal_group(proc.pid, signal.SIGKILL)


@dataclass(frozen=True)
class _Process:
    """A pid plus its start time, so a recycled pid is never signalled by mistake."""

    pid: int
    start: str

    @staticmethod
    def read(pid: int) -> tuple[int, str] | None:
        """(parent pid, start time) from /proc/<pid>/stat, None when gone."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat[stat.rfind(")") + 2:].split()  # the command name may hold spaces
        return int(fields[1]), fields[19]

    def alive(self) -> bool:
        now = self.read(self.pid)
        return now is not None and now[1] == self.start

    def group(self) -> int | None:
        try:
            return os.getpgid(self.pid)
        except ProcessLookupError:
            return None

    def signal(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _descendants(root: int) -> list[_Process]:
    """Every live descendant of ``root`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[tuple[int, str]]] = {}
    try:
        entries = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for pid in entries:
        info = _Process.read(pid)
        if info is not None:
            children.setdefault(info[0], []).append((pid, info[1]))
    found: list[_Process] = []
    pending = [root]
    while pending:
        for pid, start in children.get(pending.pop(), []):
            found.append(_Process(pid, start))
            pending.append(pid)
    return found


def _signal_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when no process is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member changed credentials (setuid): nothing we may do
        return False
    return True


#: The runner used where a caller passes none.
DEFAULT_RUNNER = CommandRunner()
