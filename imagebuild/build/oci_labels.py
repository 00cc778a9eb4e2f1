"""OCI provenance labels for every image a build makes: where its sources are, which
revision, and when (the pre-defined annotation keys of the OCI image spec,
https://github.com/opencontainers/image-spec/blob/main/annotations.md).

They are build-time labels (``--label``), as docker/metadata-action passes them, not LABEL
lines of the Dockerfile: the committed Dockerfile is a function of the recipe and its lock
and must not change with every commit of the project (``render --check``), and a LABEL
carrying the git revision would change the input hash of every image on every commit, so
nothing would be reused. A label set at build time touches no layer and no cache key. An
image reused by input hash keeps the labels of the build that made it: the revision it
was built from.

- ``org.opencontainers.image.created``: the lock's SOURCE_DATE_EPOCH (imagebuild.lock.epoch),
  not the wall clock, so that two builds of one lock carry the same date;
- ``.revision``: the CI's commit ($GITHUB_SHA, $CI_COMMIT_SHA), else the project's git HEAD,
  with ``-dirty`` when tracked files differ from it;
- ``.source``: the CI's project URL ($GITHUB_SERVER_URL/$GITHUB_REPOSITORY,
  $CI_PROJECT_URL), else the git remote ``origin``, without any credentials in it (GitLab
  runners clone with a job token in the URL).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from imagebuild.process import CommandRunner

CREATED = "org.opencontainers.image.created"
REVISION = "org.opencontainers.image.revision"
SOURCE = "org.opencontainers.image.source"

_USERINFO = re.compile(r"^(?P<scheme>[a-z][a-z0-9+.-]*://)[^/@]*@", re.IGNORECASE)


def created(epoch: int) -> str:
    """RFC 3339 in UTC, as the OCI spec asks."""
    # datetime.UTC would need Python 3.11
    return datetime.fromtimestamp(epoch, timezone.utc).strftime(  # noqa: UP017
        "%Y-%m-%dT%H:%M:%SZ")


def without_credentials(url: str) -> str:
    """``https://user:token@host/x`` -> ``https://host/x``; other URLs unchanged."""
    return _USERINFO.sub(r"\g<scheme>", url)


def _git(project: Path, runner: CommandRunner, *args: str) -> str | None:
    try:
        result = runner.capture(["git", "-C", str(project), *args], step="git", check=False,
                                timeout=30)
    except Exception:  # noqa: BLE001 - no git, or a broken one: no label, not a failed build
        return None
    return result.stdout.strip() if result.returncode == 0 and result.stdout.strip() else None


def revision(project: Path, environ: Mapping[str, str], runner: CommandRunner) -> str | None:
    for name in ("GITHUB_SHA", "CI_COMMIT_SHA"):
        if environ.get(name):
            return environ[name]
    head = _git(project, runner, "rev-parse", "--verify", "HEAD")
    if head is None:
        return None
    changed = _git(project, runner, "status", "--porcelain", "--untracked-files=no")
    return f"{head}-dirty" if changed else head


def source(project: Path, environ: Mapping[str, str], runner: CommandRunner) -> str | None:
    if environ.get("GITHUB_SERVER_URL") and environ.get("GITHUB_REPOSITORY"):
        return f"{environ['GITHUB_SERVER_URL']}/{environ['GITHUB_REPOSITORY']}"
    if environ.get("CI_PROJECT_URL"):
        return environ["CI_PROJECT_URL"]
    remote = _git(project, runner, "remote", "get-url", "origin")
    return without_credentials(remote) if remote else None


def oci_labels(project: Path, epoch: int | None, *, environ: Mapping[str, str] | None = None,
               runner: CommandRunner | None = None) -> dict[str, str]:
    """The labels that are known: none of them when neither git nor a CI names them."""
    environ = os.environ if environ is None else environ
    runner = runner or CommandRunner()
    labels = {CREATED: created(epoch)} if epoch is not None else {}
    for key, value in ((REVISION, revision(project, environ, runner)),
                       (SOURCE, source(project, environ, runner))):
        if value:
            labels[key] = value
    return labels
