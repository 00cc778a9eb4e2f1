"""What a runtime needs to use a tuning bundle: read-only mounts and environment variables.

A pure function: the EDF renderer and the docker/apptainer launchers turn the result into
their own syntax. Variables (hipBLASLt offline-tuning how-to; pytorch/pytorch
aten/src/ATen/cuda/tunable/README.md; ROCm/TransformerEngine README):
- ``HIPBLASLT_TUNING_OVERRIDE_FILE``: the override file, read by the library itself;
- ``PYTORCH_TUNABLEOP_ENABLED=1``, ``PYTORCH_TUNABLEOP_TUNING=0`` (use, never tune at run
  time), ``PYTORCH_TUNABLEOP_FILENAME``: TunableOp inserts the device ordinal before the
  extension, so ``tunableop_results.csv`` makes rank-local device d read
  ``tunableop_results<d>.csv``; the bundle holds one copy per device ordinal;
- ``TE_HIPBLASLT_ALGO_LOAD``: TransformerEngine's algorithm cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .bundle import Bundle

DEFAULT_MOUNT_POINT = "/opt/imagebuild/tuning"


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class RuntimeTuning:
    mounts: tuple[Mount, ...]
    env: tuple[tuple[str, str], ...]

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    def docker_args(self) -> list[str]:
        args: list[str] = []
        for mount in self.mounts:
            args += ["-v", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
        for key, value in self.env:
            args += ["-e", f"{key}={value}"]
        return args

    def apptainer_args(self) -> list[str]:
        args: list[str] = []
        for mount in self.mounts:
            args += ["--bind",
                     f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
        for key, value in self.env:
            args += ["--env", f"{key}={value}"]
        return args

    def edf_mounts(self) -> list[str]:
        """EDF ``mounts`` entries (``SRC:DST``; the Container Engine mounts them as given)."""
        return [f"{mount.source}:{mount.target}" for mount in self.mounts]


def runtime_tuning(bundle_dir: Path, bundle: Bundle,
                   mount_point: str = DEFAULT_MOUNT_POINT) -> RuntimeTuning:
    """Mount the bundle read-only at ``mount_point`` and point each library at its file."""
    env: list[tuple[str, str]] = []
    files = bundle.files
    if "hipblaslt_override" in files:
        env.append(("HIPBLASLT_TUNING_OVERRIDE_FILE",
                    f"{mount_point}/{files['hipblaslt_override']}"))
    if "tunableop" in files:
        env += [("PYTORCH_TUNABLEOP_ENABLED", "1"), ("PYTORCH_TUNABLEOP_TUNING", "0"),
                ("PYTORCH_TUNABLEOP_FILENAME", f"{mount_point}/{files['tunableop']}")]
    if "te_algo" in files:
        env.append(("TE_HIPBLASLT_ALGO_LOAD", f"{mount_point}/{files['te_algo']}"))
    return RuntimeTuning((Mount(str(bundle_dir.resolve()), mount_point, True),), tuple(env))
