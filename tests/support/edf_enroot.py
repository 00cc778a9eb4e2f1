"""What CSCS's Container Engine applies from an EDF, said as ``enroot start`` options: a
test tool (the tests check rendered EDFs with a real enroot through it), not shipped.

The Container Engine runs containers with enroot underneath. An EDF names the image and
says which mounts, which environment and whether the root is writable; this module reads
an EDF and says the same thing to a plain enroot (``--rw``, ``--mount``, ``--env``), so an
EDF rendered here can be checked with a real enroot away from the cluster. Semantics from
CSCS's EDF reference (https://docs.cscs.ch/software/container-engine/edf/):

- ``${VAR}`` is expanded in every field from the host's environment and the image's (the
  image's wins); an undefined variable is an error unless written ``${VAR:-default}``;
  ``$$`` is a literal ``$``. ``[env]`` values may reference only those two environments.
- ``[env]`` wins over the image's environment, which wins over the host's.
- ``mounts`` are ``SRC:DST[:FLAGS]``, flags joined with ``+``.

Not said here, because no local enroot option does it: the site hooks of
``[annotations]`` (CXI, aws_ofi_nccl), ``workdir``, ``entrypoint`` and
``base_environment``; ``EnrootStart.not_applied`` lists those an EDF sets. Nor is the
host's environment passed: the Container Engine passes it beneath the image's, enroot
alone does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imagebuild.convert.runtime_files import enroot_env_item
from imagebuild.errors import SquashError
from imagebuild.render.edf import read_edf

__all__ = ["EdfMount", "EnrootStart", "enroot_start", "expand", "read_edf"]

_REFERENCE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")
#: EDF mount flags and the enroot mount options they become (enroot's own default for a
#: bare SRC:DST is ``rbind,x-create=auto``: enroot bin/enroot-mount.c).
_MOUNT_FLAGS = {"ro": "ro", "rw": "rw"}
#: EDF keys with no local enroot equivalent: reported, not silently dropped.
_NOT_APPLIED = ("annotations", "workdir", "entrypoint", "base_environment")
_KNOWN = {"image", "writable", "mounts", "env", *_NOT_APPLIED}


@dataclass(frozen=True)
class EdfMount:
    source: str
    target: str
    flags: tuple[str, ...] = ()

    def enroot_option(self) -> str:
        """``enroot start --mount`` value: fstab fields joined by colons."""
        options = ["rbind", "x-create=auto", *(_MOUNT_FLAGS[f] for f in self.flags)]
        return f"{self.source}:{self.target}:none:{','.join(options)}"

    @property
    def read_only(self) -> bool:
        return "ro" in self.flags


@dataclass(frozen=True)
class EnrootStart:
    """The EDF, expanded, as enroot sees it."""

    image: str
    writable: bool
    mounts: tuple[EdfMount, ...]
    #: ``[env]`` after expansion: what the container's environment must show on top of
    #: the image's.
    env: dict[str, str]
    #: EDF keys set but not applied locally (see the module docstring).
    not_applied: tuple[str, ...]

    def options(self) -> list[str]:
        """``enroot start`` options, before the container name."""
        argv = ["--rw"] if self.writable else []
        for mount in self.mounts:
            argv += ["--mount", mount.enroot_option()]
        for key, value in self.env.items():
            # enroot reads --env values through the same formatter as /etc/environment
            argv += ["--env", enroot_env_item(f"{key}={value}")]
        return argv


def expand(text: str, environ: Mapping[str, str], where: str) -> str:
    """EDF variable expansion of one field value."""
    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, default = match.group(1), match.group(3)
        if name in environ:
            return environ[name]
        if match.group(2) is not None:
            return default or ""
        raise SquashError(f"{where}: ${{{name}}} is not defined in the host's or the image's "
                          "environment (the Container Engine stops here too)",
                          hint=f"set {name}, or write ${{{name}:-}} for an empty default")
    return _REFERENCE.sub(replace, text)


def _mount(spec: str, environ: Mapping[str, str], where: str) -> EdfMount:
    parts = expand(spec, environ, where).split(":")
    if len(parts) not in (2, 3) or not all(parts[:2]):
        raise SquashError(f"{where}: expected SRC:DST[:FLAGS], got {spec!r}")
    flags = tuple(f for f in parts[2].split("+") if f) if len(parts) == 3 else ()
    unknown = [f for f in flags if f not in _MOUNT_FLAGS]
    if unknown:
        raise SquashError(f"{where}: mount flag(s) {', '.join(unknown)} have no local enroot "
                          f"equivalent (known: {', '.join(_MOUNT_FLAGS)})")
    if not (parts[0].startswith("/") and parts[1].startswith("/")):
        raise SquashError(f"{where}: mount paths must be absolute, got {spec!r}")
    return EdfMount(parts[0], parts[1], flags)


def enroot_start(edf: Mapping[str, Any], host_env: Mapping[str, str],
                 image_env: Mapping[str, str], source: str = "EDF") -> EnrootStart:
    """``edf`` (parsed TOML) with variables resolved from ``host_env`` and ``image_env``."""
    unknown = sorted(set(edf) - _KNOWN)
    if unknown:
        raise SquashError(f"{source}: unknown EDF key(s): {', '.join(unknown)}")
    environ = {**host_env, **image_env}
    image = edf.get("image")
    if not isinstance(image, str) or not image:
        raise SquashError(f"{source}: image: expected the path of a squashfs file")
    writable = edf.get("writable", True)
    if not isinstance(writable, bool):
        raise SquashError(f"{source}: writable: expected true or false, got {writable!r}")
    mounts = tuple(_mount(spec, environ, f"{source}: mounts[{i}]")
                   for i, spec in enumerate(edf.get("mounts", [])))
    env = {key: expand(str(value), environ, f"{source}: env.{key}")
           for key, value in (edf.get("env") or {}).items()}
    return EnrootStart(image=expand(image, environ, f"{source}: image"), writable=writable,
                       mounts=mounts, env=env,
                       not_applied=tuple(k for k in _NOT_APPLIED if edf.get(k)))

