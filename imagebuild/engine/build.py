"""Dockerfile -> image (BuildKit via docker, or podman): log, progress, retries.

``build_image`` runs one build through an ``Engine`` (imagebuild.engine.base), streams its
output to the log file and to a progress callback, retries transient failures (registry
pulls, index downloads) with backoff and never deterministic ones, and tags the image only
after the build succeeded: an interrupted or failed build leaves no new tag behind.

Site CA (``--site-ca PATH`` / ``$IMAGEBUILD_SITE_CA``): some networks (the project's own
CI machines among them) reach PyPI through a TLS-intercepting proxy with a private CA.
The CA bundle goes in as the BuildKit secret ``site-ca``, which the rendered Dockerfiles
mount (``RUN --mount=type=secret,id=site-ca,required=false``) only for the steps that
download, so it is never stored in a layer and the image is the same with or without it.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

import tenacity

from imagebuild.engine.base import BuildRequest, Engine
from imagebuild.engine.cache import RegistryCache
from imagebuild.engine.docker import DockerEngine
from imagebuild.engine.progress import (
    BuildEvent,
    BuildFailure,
    BuildLogParser,
    concise_error,
)
from imagebuild.errors import BuildError, EngineError
from imagebuild.images import ImageRef
from imagebuild.render.layout import SITE_CA

ProgressCallback = Callable[[BuildEvent], None]

#: BuildKit secret id of the site CA bundle; Dockerfiles mount it at SITE_CA_PATH.
SITE_CA_SECRET_ID = "site-ca"
SITE_CA_PATH = SITE_CA  # where the rendered Dockerfiles mount it (render.layout)
SITE_CA_ENV = "IMAGEBUILD_SITE_CA"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff for transient failures (registry, index downloads)."""

    attempts: int = 3
    wait_initial_s: float = 10.0
    wait_max_s: float = 120.0

    def retrying(self, retry_on: type[BaseException]) -> tenacity.Retrying:
        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(max(1, self.attempts)),
            wait=tenacity.wait_exponential(multiplier=self.wait_initial_s,
                                           max=self.wait_max_s),
            retry=tenacity.retry_if_exception_type(retry_on),
            reraise=True,
        )



# --------------------------------------------------------------------------------------
# Failure classification
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Classification:
    transient: bool
    #: the text that decided it (a matched pattern), for the log
    reason: str


# Checked first: failures that a retry cannot fix, even when a network word appears.
_DETERMINISTIC = [re.compile(p, re.IGNORECASE) for p in (
    r"dockerfile parse error", r"unknown instruction", r"unknown flag",
    r"manifest unknown", r": not found$", r"\bnot found: manifest", r"404 (Client Error|Not Found)",
    r"\bunauthorized\b", r"\bdenied\b", r"authentication required",
    r"no matching distribution found", r"could not find a version that satisfies",
    r"do not match the hashes", r"hash mismatch", r"no solution found",
    r"certificate verify failed", r"x509: certificate", r"invalid reference format",
)]
# A registry, index or mirror that did not answer properly this time.
_TRANSIENT = [re.compile(p, re.IGNORECASE) for p in (
    r"failed to resolve", r"i/o timeout", r"connection reset", r"connection refused",
    r"tls handshake timeout", r"net/http: request canceled", r"unexpected eof",
    r"temporary failure (in name resolution|resolving)", r"server misbehaving",
    r"no such host", r"could not resolve host", r"toomanyrequests", r"\b429 too many",
    r"\b50[0234]\b.*(error|gateway|unavailable|time-?out)", r"unexpected (http )?status:? 5\d\d",
    r"service unavailable", r"bad gateway", r"gateway time-?out",
    # pip / urllib3 / requests
    r"readtimeouterror", r"connecttimeouterror", r"connection broken", r"protocolerror",
    r"incompleteread", r"max retries exceeded", r"remotedisconnected",
    # uv
    r"error sending request for url", r"operation timed out", r"request or response body error",
    r"connection closed before message completed", r"dns error",
    # apt, curl, git
    r"failed to fetch .*(connection|timed out|unreachable)", r"could not connect to",
    r"hash sum mismatch", r"curl: \((6|7|18|28|35|52|56)\)", r"early eof", r"rpc failed",
)]


def classify_failure(text: str) -> Classification:
    """Transient (retry) or deterministic (stop), from a failing step's tail + error line.

    Pass only the failing step's output and the engine's error, not the whole log:
    earlier steps may have printed (and survived) a network warning.
    """
    for line in text.splitlines():
        for pattern in _DETERMINISTIC:
            if pattern.search(line.strip()):
                return Classification(False, line.strip())
    for line in text.splitlines():
        for pattern in _TRANSIENT:
            if pattern.search(line):
                return Classification(True, line.strip())
    return Classification(False, "no network or registry failure in the step's output")


# --------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------

class _TransientBuildFailure(Exception):
    def __init__(self, error: BuildError):
        super().__init__(str(error))
        self.error = error


def resolve_site_ca(path: str | os.PathLike | None = None,
                    environ: Mapping[str, str] | None = None) -> Path | None:
    """The site CA bundle from ``--site-ca`` or $IMAGEBUILD_SITE_CA (None when neither)."""
    environ = os.environ if environ is None else environ
    value = path if path is not None else environ.get(SITE_CA_ENV) or None
    if value is None:
        return None
    where = "--site-ca" if path is not None else SITE_CA_ENV
    ca = Path(value).expanduser()
    if not ca.is_file() or ca.stat().st_size == 0:
        raise BuildError(f"{where} {ca}: expected a non-empty PEM CA bundle file")
    return ca.resolve()


_TLS_TRUST = re.compile(r"certificate verify failed|x509: certificate signed by unknown",
                        re.IGNORECASE)


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _failure_error(failure: BuildFailure, engine: Engine, log_path: Path,
                   attempts: int) -> BuildError:
    tail = [line for line in failure.tail if line.strip() != failure.message.strip()]
    after = f" (after {attempts} attempts)" if attempts > 1 else ""
    message = (f"image build failed with {engine.backend}{after}: "
               f"{_shorten(concise_error(failure.message), 300)}")
    if _TLS_TRUST.search(failure.text):
        message += (f" (a TLS-intercepting proxy? pass its CA bundle with --site-ca PATH "
                    f"or ${SITE_CA_ENV})")
    return BuildError(message, step=_shorten(failure.step) if failure.step else None,
                      log_tail="\n".join(tail), log_path=log_path)


def build_image(engine: Engine, dockerfile: Path, context: Path, tags: Sequence[str], *,
                target: str | None = None, build_args: Mapping[str, str] | None = None,
                secrets: Mapping[str, Path] | None = None,
                labels: Mapping[str, str] | None = None, network: str | None = "host",
                log_path: Path, progress: ProgressCallback | None = None,
                builder: str | None = None, no_cache: bool = False,
                cache: RegistryCache | None = None, provenance: bool = False,
                retry: RetryPolicy = RetryPolicy()) -> ImageRef:
    """Build ``dockerfile`` in ``context``; tag the result with ``tags`` once it succeeded.

    The full output goes to ``log_path`` (rewritten per build; retries appended). Raises
    BuildError naming the failing step with its output tail; KeyboardInterrupt stops the
    build and leaves no tag. ``secrets`` maps BuildKit secret ids to files (see SITE_CA_SECRET_ID).
    ``cache``: import the stages' earlier results from a registry and, once the image is
    built and tagged, export this build's (an engine that cannot is refused before the
    build starts). ``provenance``: attach the engine's provenance attestation.
    """
    dockerfile, context = Path(dockerfile), Path(context)
    if not dockerfile.is_file():
        raise BuildError(f"{dockerfile}: Dockerfile not found")
    if not context.is_dir():
        raise BuildError(f"{context}: build context is not a directory")
    for secret_id, path in (secrets or {}).items():
        if not Path(path).is_file():
            raise BuildError(f"build secret {secret_id}: {path} is not a file")
    if builder:
        if not isinstance(engine, DockerEngine):
            raise EngineError(f"--builder {builder}: only valid with the docker backend (buildx)")
        engine = engine.using_builder(builder)  # EngineError when this client has no buildx
    if cache is not None and (problem := engine.registry_cache_problem()) is not None:
        flag = "--cache-to" if cache.cache_to else "--cache-from"
        raise EngineError(f"{flag}: {problem}", hint=CACHE_HINT)
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)

    attempt = 0
    # One log per build (its attempts appended); line-buffered so that `tail -f` follows
    # an hours-long build as it happens.
    with open(log_path, "w", encoding="utf-8", buffering=1) as log, \
            tempfile.TemporaryDirectory(prefix="imagebuild-build-") as tmp:
        def one_attempt() -> str:
            nonlocal attempt
            attempt += 1
            iidfile = Path(tmp) / f"iid-{attempt}"
            request = BuildRequest(
                dockerfile=dockerfile.resolve(), context=context.resolve(), tags=(),
                target=target, build_args=dict(build_args or {}),
                secrets={k: Path(v).resolve() for k, v in (secrets or {}).items()},
                labels=dict(labels or {}), network=network, no_cache=no_cache,
                iidfile=iidfile, cache=cache, provenance=provenance)
            requests.append(request)
            return _run_attempt(engine, request, log, log_path, progress, attempt, retry)

        requests: list[BuildRequest] = []
        try:
            for attempt_state in retry.retrying(_TransientBuildFailure):
                with attempt_state:
                    image_id = one_attempt()
        except _TransientBuildFailure as exc:
            raise exc.error from None
        except KeyboardInterrupt:
            _log(log, "interrupted: build stopped, no image tagged")
            raise
        for tag in tags:
            engine.tag(image_id, tag)
        _log(log, f"built {image_id}" + (f", tagged {', '.join(tags)}" if tags else ""))
        _export_cache(engine, requests[-1], log, log_path)
    return ImageRef(ref=tags[0] if tags else image_id, image_id=image_id, tags=tuple(tags),
                    backend=engine.backend)


#: What to do when an engine cannot keep its build cache in a registry.
CACHE_HINT = ("build with docker buildx on a builder that exports caches (a docker-container "
              "or remote builder: --builder NAME, or a daemon with the containerd image "
              "store), or with podman 4.4 or newer (--backend podman); or leave out "
              "--cache-from/--cache-to")


def _export_cache(engine: Engine, request: BuildRequest, log: IO[str], log_path: Path) -> None:
    """The engine's cache exports still to run after the build (BuildKit: one per stage).
    A failed export fails the build: the image is built and tagged, but the next runner
    would start from nothing."""
    for stage, argv, env in engine.cache_export_commands(request):
        _log(log, f"exporting the build cache of stage {stage}")
        log.write("$ " + " ".join(argv) + "\n")
        parser = BuildLogParser(engine.progress_format)  # type: ignore[arg-type]

        def on_line(line: str, parser: BuildLogParser = parser) -> None:
            log.write(line + "\n")
            parser.feed(line)

        result = engine.runner.run(argv, env=env, on_line=on_line, keep_lines=200)
        if result.returncode != 0:
            failure = parser.failure()
            error = BuildError(
                f"exporting the build cache of stage {stage} failed: "
                f"{_shorten(concise_error(failure.message), 300)}",
                step=f"cache export of stage {stage}", log_tail="\n".join(failure.tail),
                log_path=log_path)
            error.hint = ("the image itself is built and tagged; check that the cache "
                          "registry answers and takes pushes (log in first), then build "
                          "again")
            raise error


def _log(log: IO[str], text: str) -> None:
    # datetime.UTC would need Python 3.11
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: UP017
    log.write(f"== imagebuild {stamp}: {text}\n")
    log.flush()


def _run_attempt(engine: Engine, request: BuildRequest, log: IO[str], log_path: Path,
                 progress: ProgressCallback | None, attempt: int, retry: RetryPolicy) -> str:
    argv, _env = engine.build_command(request)
    _log(log, f"attempt {attempt}/{retry.attempts} with {engine.describe()}")
    log.write("$ " + " ".join(argv) + "\n")
    parser = BuildLogParser(engine.progress_format)  # type: ignore[arg-type]

    def on_line(line: str) -> None:
        log.write(line + "\n")
        for event in parser.feed(line):
            if progress is not None:
                progress(event)

    try:
        result = engine.build(request, on_line=on_line)
    finally:
        log.flush()
    if result.returncode == 0:
        iidfile = request.iidfile
        image_id = iidfile.read_text().strip() if iidfile and iidfile.exists() else ""
        if not image_id:
            raise BuildError(f"{engine.describe()} reported success but wrote no image id",
                             log_path=log_path)
        return image_id if ":" in image_id else f"sha256:{image_id}"
    failure = parser.failure()
    verdict = classify_failure(failure.text)
    error = _failure_error(failure, engine, log_path, attempt)
    if verdict.transient and attempt < retry.attempts:
        _log(log, f"transient failure ({_shorten(verdict.reason, 160)}); retrying")
        raise _TransientBuildFailure(error)
    _log(log, f"failed (exit {result.returncode}; "
              f"{'transient' if verdict.transient else 'deterministic'}: "
              f"{_shorten(verdict.reason, 160)})")
    raise error
