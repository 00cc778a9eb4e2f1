"""What a runtime needs to use a tuning bundle: a read-only mount and environment variables.

A pure function: the EDF renderer and the validate launchers turn the result into their
own syntax. The variables are ``tuning_env``'s (imagebuild.inimage.tuning.bundle_format,
whose docstring names each one and its source); a derived image sets the same ones with the bundle copied to the same
place, so a bundle behaves the same mounted or baked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imagebuild.inimage.tuning.bundle_format import DEFAULT_MOUNT_POINT, Bundle, tuning_env
from imagebuild.recipe.site_runtime import Bind

__all__ = ["DEFAULT_MOUNT_POINT", "RuntimeTuning", "runtime_tuning"]


@dataclass(frozen=True)
class RuntimeTuning:
    #: the same binds a site profile adds (``Bind.spec()``: docker -v, apptainer --bind, EDF)
    mounts: tuple[Bind, ...]
    env: tuple[tuple[str, str], ...]

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def docker_args(self) -> list[str]:
        args: list[str] = []
        for mount in self.mounts:
            args += ["-v", mount.spec()]
        for key, value in self.env:
            args += ["-e", f"{key}={value}"]
        return args

    def apptainer_args(self) -> list[str]:
        args: list[str] = []
        for mount in self.mounts:
            args += ["--bind", mount.spec()]
        for key, value in self.env:
            args += ["--env", f"{key}={value}"]
        return args

    def edf_mounts(self) -> list[str]:
        """EDF ``mounts`` entries (``SRC:DST:ro``; flags after the second colon, CSCS EDF
        reference: https://docs.cscs.ch/software/container-engine/edf/)."""
        return [mount.spec() for mount in self.mounts]


def runtime_tuning(bundle_dir: Path, bundle: Bundle,
                   mount_point: str = DEFAULT_MOUNT_POINT) -> RuntimeTuning:
    """Mount the bundle read-only at ``mount_point`` and point each library at its file."""
    return RuntimeTuning((Bind(str(bundle_dir.resolve()), mount_point, read_only=True),),
                         tuple(tuning_env(bundle, mount_point).items()))
