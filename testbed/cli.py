"""imagebuild's command line in a child process, as a project on this machine runs it: the
project and its download cache, the docker backend, and this machine's CA bundle as the
site CA (builds reach PyPI through the workplace's CA)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SITE_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def run_imagebuild(project: Path, *argv: str, timeout: int
                   ) -> subprocess.CompletedProcess[str]:
    """``imagebuild ARGV`` for ``project`` (its cache under ``project/.cache``), output
    captured; the caller checks the exit status."""
    env = dict(os.environ, IMAGEBUILD_PROJECT=str(project), IMAGEBUILD_BACKEND="docker",
               IMAGEBUILD_CACHE=str(project / ".cache"))
    if SITE_CA.is_file():
        env["IMAGEBUILD_SITE_CA"] = str(SITE_CA)
    return subprocess.run([sys.executable, "-m", "imagebuild", *argv], env=env, check=False,
                          capture_output=True, text=True, timeout=timeout)
