"""The one exception tree of imagebuild.

Library code raises these and never prints or exits; ``imagebuild.cli`` turns each into
one clear line per problem (file, key or step; what was expected) and exit code 2.
A failed validation check is data, not an exception (exit code 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: How a hint is said inside a message text (and how str() of an error says it).
_HINT = "\nhint: "


class ImagebuildError(Exception):
    """Base class: every expected failure. ``str()`` is the user-facing message: what
    failed, then (when known) where (a file:line:key, a step, a URL) and a hint."""

    exit_code = 2

    def __init__(self, message: str = "", *, where: str | None = None,
                 hint: str | None = None):
        self.message = message
        self.where = where
        self.hint = hint
        super().__init__(message)

    def text(self) -> str:
        """What failed and where, without the hint (the CLI prints the hint on its own line)."""
        return f"{self.where}: {self.message}" if self.where else self.message

    def __str__(self) -> str:
        text = self.text()
        return f"{text}{_HINT}{self.hint}" if self.hint else text


@dataclass(frozen=True)
class Problem:
    """One problem in an input file, with its location."""

    file: Path | str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{display_path(self.file)}:{self.line}" if self.line \
            else display_path(self.file)
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


def short_path(path: Path) -> str:
    """``recipes/rocm-7.0.2.yaml``: parent folder and name, the same on every checkout (file
    headers, messages about project files)."""
    return f"{path.parent.name}/{path.name}" if path.parent.name else path.name


def display_path(path: Path | str, root: Path | None = None) -> str:
    """Relative to ``root`` (default: the working directory) when below it: short,
    clickable messages."""
    base = (root or Path.cwd()).resolve()
    try:
        return str(Path(path).resolve().relative_to(base))
    except ValueError:
        return str(path)


class InputError(ImagebuildError):
    """An input file is invalid; carries every problem found at once, each with its file,
    line and key (printed one line each)."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class RecipeError(InputError):
    """A recipe (or a file it extends) is invalid."""


class RecipeNotFound(ImagebuildError):
    pass


class LockError(ImagebuildError):
    """Locking failed or a lock is missing, stale or inconsistent."""


class WheelIndexError(ImagebuildError):
    """The wheel index could not be read or does not hold what the recipe asks for."""


class DownloadError(ImagebuildError):
    """A download failed after retries, or its bytes do not match the pinned hash."""


class HashMismatch(DownloadError):
    pass


class SourceError(ImagebuildError):
    """A git repository or source archive could not be resolved."""


class RenderError(ImagebuildError):
    pass


class StaleFile(ImagebuildError):
    """Generated, committed files do not match what their inputs produce now; one line per
    file, each naming the command that regenerates it."""

    def __init__(self, lines: list[str] | str):
        self.lines = lines.splitlines() if isinstance(lines, str) else list(lines)
        super().__init__("\n".join(self.lines))


class EngineError(ImagebuildError):
    """The container engine (docker, podman) is missing, unreachable or failed."""


class StorageUnavailable(EngineError):
    """Why an image cannot be read from the engine's storage here. An internal signal:
    ``--read auto`` falls back to the engine's export on it, ``--read storage`` turns it
    into an EngineError with a hint; it never reaches the CLI on its own."""


class CommandFailed(ImagebuildError):
    """An external command exited non-zero (or timed out): names the step, the command and
    its exit code, and carries the tail of its output."""

    def __init__(self, step: str, argv: tuple[str, ...], returncode: int | None, tail: str,
                 *, hint: str = ""):
        self.step, self.argv, self.returncode, self.tail = step, argv, returncode, tail
        status = "timed out" if returncode is None else f"exited with {returncode}"
        message = f"{step} failed: `{' '.join(argv[:3])}{' ...' if len(argv) > 3 else ''}` {status}"
        if tail.strip():
            message += "\n" + tail.rstrip()
        super().__init__(message, hint=hint or None)


class BuildError(ImagebuildError):
    """An image build failed; names the failing step and carries the tail of its output."""

    def __init__(self, message: str, step: str | None = None, log_tail: str = "",
                 log_path: Path | None = None):
        self.step = step
        self.log_tail = log_tail
        self.log_path = log_path
        parts = [message]
        if step:
            parts.append(f"failing step: {step}")
        if log_tail:
            parts.append(log_tail.rstrip())
        if log_path:
            parts.append(f"full log: {log_path}")
        super().__init__("\n".join(parts))


class SquashError(ImagebuildError):
    pass


class ValidateError(ImagebuildError):
    """The validation suite could not run (not: a check failed, which is a result)."""


class PromoteError(ImagebuildError):
    """A tested marker or a stable tag was refused (no proof, a tag that would move), or
    the registry could not answer."""


class TuneError(ImagebuildError):
    """Tuning input (trace, log, CSV, bundle) is unusable, or tuning cannot run."""

    def __init__(self, message: str = "", *, where: str | None = None,
                 hint: str | None = None):
        if hint is None and _HINT in message:
            # The in-image tuning code (standard library + torch only) cannot raise these:
            # its errors say their hint in the text, and the TuneError made from one
            # carries it over. Only here: a command's output may hold "hint:" lines of
            # its own (git's), which are detail, not our hint.
            message, hint = message.split(_HINT, 1)
        super().__init__(message, where=where, hint=hint)


class CIConfigError(InputError):
    """The CI configuration (ci/config.yaml, or the shipped default) is invalid;
    carries every problem found at once. Not a recipe error: it names the CI file."""


class SiteProfileError(InputError):
    """A site profile (imagebuild/data/sites/*.yaml or a project's sites/) is invalid;
    carries every problem found at once, each with its file and line."""
