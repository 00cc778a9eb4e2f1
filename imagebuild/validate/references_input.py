"""The references a validation run is judged against, from the host's side.

``imagebuild validate --references FILE`` names them, or the site profile's ``references``
key does (a file beside the profile); the flag wins. Either may be YAML or JSON: the host
reads it, checks it with the in-image parser (so both sides accept the same documents) and
hands the runner JSON, which is all the in-image package reads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from imagebuild.errors import ValidateError
from imagebuild.inimage.gpu_data import UsageError
from imagebuild.inimage.references import parse_references
from imagebuild.recipe.site import SiteProfile, site_directory


def read_references(path: Path) -> dict[str, Any]:
    """A references file (YAML or JSON), checked; a problem raises naming file and key."""
    try:
        data = path.read_bytes()
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise ValidateError(f"{path}: not a text file ({exc.reason})") from exc
    except OSError as exc:
        raise ValidateError(f"{path}: cannot read references ({exc.strerror})",
                            hint="--references FILE, or the site profile's references key, "
                                 "names a YAML or JSON file") from exc
    try:
        if path.suffix == ".json":
            raw = json.loads(text)
        else:
            import yaml

            raw = yaml.safe_load(text)
    except Exception as exc:  # json's ValueError, yaml's YAMLError
        raise ValidateError(f"{path}: not valid {path.suffix.lstrip('.') or 'YAML'}: "
                            f"{str(exc).splitlines()[0]}") from exc
    try:
        parse_references(raw, str(path))
    except UsageError as exc:
        raise ValidateError(str(exc), hint="each figure is <check>.<figure>: [value, lower, "
                                           "upper, unit], like gemm.tflops: [520, -0.1, null, "
                                           "TFLOP/s]") from exc
    # The runner reads a JSON copy: "file" tells it (and its report) what the copy is of.
    return {**raw, "file": {"path": str(path), "sha256": hashlib.sha256(data).hexdigest()}}


def references_for_run(flag: str | None, site: SiteProfile | None,
                       project: Path | None) -> tuple[dict[str, Any], Path] | None:
    """(document, file) from ``--references`` or the site profile; None when neither."""
    if flag:
        path = Path(flag)
    elif site is not None and site.references:
        path = Path(site.references)
        if not path.is_absolute():
            path = site_directory(site, project) / path
    else:
        return None
    return read_references(path), path
