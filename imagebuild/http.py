"""The one HTTP client of imagebuild: every request it makes (wheel index listings, wheel
and archive downloads, registry manifests and tokens) goes through a session made here and
the one retry loop below.

Policy: retry with exponential backoff on connection errors, resets, timeouts, truncated
bodies and 5xx (also 408 and 429); never on other 4xx, which are answers, not accidents,
nor on TLS certificate errors. Attempts and the per-request (connect, read) timeout are
bounded and configurable: arguments, else IMAGEBUILD_HTTP_RETRIES (retries after the first
attempt) and IMAGEBUILD_HTTP_TIMEOUT (seconds, or "CONNECT,READ"), else the defaults.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import requests
import tenacity
import urllib3

from imagebuild import __version__
from imagebuild.errors import DownloadError, ImagebuildError

USER_AGENT = f"imagebuild/{__version__}"
ENV_RETRIES = "IMAGEBUILD_HTTP_RETRIES"
ENV_TIMEOUT = "IMAGEBUILD_HTTP_TIMEOUT"

T = TypeVar("T")
#: Retries are logged here; the CLI shows this logger's warnings on stderr.
LOG = logging.getLogger(__name__)


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class HttpPolicy:
    """How hard to try: attempts = retries + 1; waits grow from ``backoff`` to ``backoff_max``."""

    retries: int = 4
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    backoff: float = 1.0
    backoff_max: float = 30.0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ValueError("timeouts must be > 0")
        if self.backoff < 0 or self.backoff_max < 0:
            raise ValueError("backoff must be >= 0")

    @property
    def attempts(self) -> int:
        return self.retries + 1

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.connect_timeout, self.read_timeout)

    @classmethod
    def resolve(
        cls,
        *,
        retries: int | None = None,
        timeout: float | tuple[float, float] | None = None,
        backoff: float | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> HttpPolicy:
        """Arguments win over the environment, which wins over the defaults."""
        env = os.environ if environ is None else environ
        default = cls()
        if retries is None:
            retries = _env_int(env, ENV_RETRIES, default.retries)
        if timeout is None:
            timeout = _env_timeout(env, ENV_TIMEOUT, default.timeout)
        connect, read = timeout if isinstance(timeout, tuple) else (timeout, timeout)
        backoff = default.backoff if backoff is None else backoff
        return cls(retries=retries, connect_timeout=float(connect), read_timeout=float(read),
                   backoff=backoff, backoff_max=max(default.backoff_max, backoff))


def _env_int(env: Mapping[str, str], key: str, default: int) -> int:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise ImagebuildError(f"environment {key}={raw!r}: expected a whole number of retries >= 0")
    return int(raw)


def _env_timeout(env: Mapping[str, str], key: str,
                 default: tuple[float, float]) -> tuple[float, float]:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    try:
        parts = [float(p) for p in raw.split(",")]
    except ValueError:
        parts = []
    if len(parts) not in (1, 2) or min(parts) <= 0:
        raise ImagebuildError(
            f"environment {key}={raw!r}: expected seconds > 0, or CONNECT,READ seconds")
    return (parts[0], parts[-1])


# --------------------------------------------------------------------------- failures


class Retryable(Exception):
    """A failure worth another attempt (5xx, truncated body); str() is the reason."""


class Final(Exception):
    """A failure no retry can fix (4xx, a size that differs from a pin); str() is the reason.

    ``error``: the ImagebuildError class to raise for it, when not the caller's default.
    """

    error: type[ImagebuildError] | None = None


class GaveUp(Exception):
    """The last failure of ``HttpClient.attempt``: its one-line reason and the attempts made."""

    def __init__(self, reason: str, attempts: int, cause: BaseException):
        super().__init__(reason)
        self.reason, self.attempts, self.cause = reason, attempts, cause


def is_transient(exc: BaseException) -> bool:
    if isinstance(exc, requests.exceptions.SSLError):  # a certificate does not fix itself
        return False
    return isinstance(exc, (
        Retryable,
        requests.ConnectionError,  # refused, reset, DNS, and read timeouts while streaming
        requests.Timeout,
        requests.exceptions.ChunkedEncodingError,
        urllib3.exceptions.ProtocolError,  # raw.stream(): reset or short body mid-transfer
        urllib3.exceptions.TimeoutError,  # raw.stream(): stall mid-transfer
    ))


def is_retryable_status(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def check_status(resp: requests.Response) -> None:
    """Raise ``Retryable`` or ``Final`` for an HTTP error status."""
    if resp.status_code < 400:
        return
    reason = f"HTTP {resp.status_code} {resp.reason or ''}".rstrip()
    if is_retryable_status(resp.status_code):
        raise Retryable(reason)
    raise Final(f"{reason} (not retried)")


_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")\]]+)")


def describe(exc: BaseException, policy: HttpPolicy) -> str:
    """One short line for a network failure (requests' own messages nest four reprs deep)."""
    if isinstance(exc, (Retryable, Final)):
        return str(exc)
    if isinstance(exc, requests.ConnectTimeout):
        return f"connection timed out after {policy.connect_timeout:g}s"
    text = str(exc)
    if isinstance(exc, (requests.ReadTimeout, urllib3.exceptions.ReadTimeoutError)) \
            or "Read timed out" in text:
        return f"no data for {policy.read_timeout:g}s (read timeout)"
    match = _ERRNO_TEXT.search(text)
    if match:
        return match.group(1).strip().lower()
    for phrase in ("Remote end closed connection without response", "Connection reset by peer",
                   "Connection refused", "Connection aborted", "IncompleteRead"):
        if phrase in text:
            return phrase.lower()
    line = " ".join(text.split()) or type(exc).__name__
    return line if len(line) <= 200 else line[:197] + "..."


# --------------------------------------------------------------------------- client


def new_session() -> requests.Session:
    """A requests session that names imagebuild in its User-Agent."""
    session = requests.Session()
    session.headers["User-Agent"] = USER_AGENT
    return session


class HttpClient:
    """A requests session plus the retry policy."""

    def __init__(self, session: requests.Session | None = None, policy: HttpPolicy | None = None,
                 *, sleep: Callable[[float], None] = time.sleep):
        self.session = session if session is not None else new_session()
        self.policy = policy if policy is not None else HttpPolicy.resolve()
        self._sleep = sleep

    @classmethod
    def configured(cls, *, session: requests.Session | None = None, retries: int | None = None,
                   timeout: float | tuple[float, float] | None = None,
                   backoff: float | None = None) -> HttpClient:
        """A client whose policy takes the given values, the environment for the rest."""
        return cls(session, HttpPolicy.resolve(retries=retries, timeout=timeout,
                                               backoff=backoff))

    def retrying(self, label: str = "") -> tenacity.Retrying:
        p = self.policy

        def before_sleep(state: tenacity.RetryCallState) -> None:
            # A retry is news: without it a dead index looks like a hung command.
            failure = state.outcome.exception() if state.outcome else None
            wait = state.next_action.sleep if state.next_action else 0.0
            LOG.warning("%s: %s; retry %d of %d in %.0f s", label or "request",
                        describe(failure, p) if failure else "failed", state.attempt_number,
                        p.attempts - 1, wait)

        return tenacity.Retrying(
            before_sleep=before_sleep,
            stop=tenacity.stop_after_attempt(p.attempts),
            # backoff * 2**n plus jitter up to one backoff, so that parallel clients spread
            # (spelled out: wait_exponential_jitter's arguments changed across tenacity 8/9).
            wait=tenacity.wait_exponential(multiplier=p.backoff, max=p.backoff_max)
            + tenacity.wait_random(0, p.backoff),
            retry=tenacity.retry_if_exception(is_transient),
            reraise=True,
            sleep=self._sleep,
        )

    def attempt(self, once: Callable[[], T], label: str = "") -> T:
        """Call ``once`` until it succeeds, a failure is final, or the attempts run out;
        an HTTP or network failure then leaves as ``GaveUp``. Other exceptions (an
        ImagebuildError raised by ``once``, KeyboardInterrupt) pass through at once."""
        attempts = 0
        try:
            for attempt in self.retrying(label):
                with attempt:
                    attempts = attempt.retry_state.attempt_number
                    return once()
        except (Final, Retryable, requests.RequestException,
                urllib3.exceptions.HTTPError) as exc:
            raise GaveUp(describe(exc, self.policy), attempts, exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def run(self, url: str, what: str, error: type[ImagebuildError], once: Callable[[], T]) -> T:
        """``attempt``, with the last failure as one ``error`` line naming ``what`` and ``url``."""
        try:
            return self.attempt(once, f"{what} {url}")
        except GaveUp as exc:
            tries = f" after {exc.attempts} attempts" if exc.attempts > 1 else ""
            kind = getattr(exc.cause, "error", None) or error
            raise kind(f"{what} {url}: {exc.reason}{tries}") from exc.cause
        except OSError as exc:  # local, e.g. the cache disk is full: not retried
            raise error(f"{what} {url}: {exc.strerror or exc}") from exc

    def get_text(self, url: str, *, what: str = "GET",
                 error: type[ImagebuildError] = DownloadError) -> tuple[str, str]:
        """A small document (an index listing): returns (text, final URL after redirects)."""
        found = self._get_text(url, what, error, missing_ok=False)
        assert found is not None
        return found

    def get_text_if_present(self, url: str, *, what: str = "GET",
                            error: type[ImagebuildError] = DownloadError
                            ) -> tuple[str, str] | None:
        """As ``get_text``, or None where the server answers 404 (a PEP 503 index has no page
        for a project it does not hold)."""
        return self._get_text(url, what, error, missing_ok=True)

    def _get_text(self, url: str, what: str, error: type[ImagebuildError], *,
                  missing_ok: bool) -> tuple[str, str] | None:
        def once() -> tuple[str, str] | None:
            with self.session.get(url, timeout=self.policy.timeout) as resp:
                if missing_ok and resp.status_code == 404:
                    return None
                check_status(resp)
                body = resp.content  # small: a listing is a few hundred KB at most
                return body.decode(resp.encoding or "utf-8", errors="replace"), resp.url

        return self.run(url, what, error, once)
