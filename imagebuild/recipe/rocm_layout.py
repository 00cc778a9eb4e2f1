"""Where a ROCm release line installs itself in a base image.

The packaged line (up to 7.2.x) installs to /opt/rocm (a symlink to /opt/rocm-X.Y.Z). The
ROCm Core SDK built by TheRock installs to /opt/rocm/core on 7.14.x and to
/opt/rocm/core-<major>.<minor> from 10.0 on, with its packages named amdrocm-*; the amdrocm
meta package adds /opt/rocm/bin, /opt/rocm/lib and other compatibility symlinks, a tarball
install does not (rocm.docs.amd.com, "Transition guide from legacy ROCm release stream",
docs-7.14.0 and docs-10.0.0). A recipe building on such a base gets the real directory as
its rocm_prefix unless it names one: the stages then compile and link against it, not
against links that only some install formats make.
"""

from __future__ import annotations

import re

PACKAGED_PREFIX = "/opt/rocm"


def release(rocm: str) -> tuple[int, int]:
    """(major, minor) of a checked ROCm version such as 7.0.2."""
    major, minor = (int(part) for part in rocm.split(".")[:2])
    return major, minor


def is_therock_line(rocm: str) -> bool:
    """7.14.x and 10.x and later: the Core SDK lines (there is no 8 or 9)."""
    match = re.match(r"(\d+)\.(\d+)", rocm)
    if not match:
        return False
    major, minor = int(match.group(1)), int(match.group(2))
    return major >= 10 or (major == 7 and minor >= 14)


def system_prefix(rocm: str | None) -> str:
    """The directory a base image of this ROCm release installs ROCm to."""
    if rocm is None or not is_therock_line(rocm):
        return PACKAGED_PREFIX
    major, minor = release(rocm)
    return f"{PACKAGED_PREFIX}/core-{major}.{minor}" if major >= 10 else f"{PACKAGED_PREFIX}/core"
