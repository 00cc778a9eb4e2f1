"""The history file a validation run appends to, from the host's side.

``imagebuild validate --history FILE`` names it, or the site profile's ``history`` key does,
so every run on a system lands in that system's history without the flag. The profile's
value is shared by everyone who runs there, so it must name one file wherever the run
starts: ``${VAR}`` (from the environment, like ``${SCRATCH}``) and ``~`` are expanded, and
the result must be absolute.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from imagebuild.errors import ValidateError
from imagebuild.recipe.site import SiteProfile
from imagebuild.validate.site_defaults import expand_refs

_UNSET = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def history_for_run(flag: str | None, site: SiteProfile | None,
                    environ: Mapping[str, str]) -> Path | None:
    """The file from ``--history``, else from the site profile; None when neither names one."""
    if flag:
        return Path(flag)
    if site is None or not site.history:
        return None
    expanded = expand_refs(site.history, environ)
    unset = _UNSET.search(expanded)
    if unset:
        raise ValidateError(f"{site.source}: history: {site.history}: ${{{unset.group(1)}}} "
                            "is not set in this environment",
                            hint="set it, or pass --history FILE for this run")
    path = Path(os.path.expanduser(expanded))
    if not path.is_absolute():
        raise ValidateError(f"{site.source}: history: {site.history}: expected an absolute "
                            "path (after ${VAR} and ~ are expanded)",
                            hint="every run on the system appends to one file, like "
                                 "${SCRATCH}/imagebuild/history.jsonl; a relative path "
                                 "would depend on where validate starts")
    return path
