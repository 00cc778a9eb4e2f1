"""Which container runtime a job's image runs under, and how many nodes the job spans:
two things a failure can depend on that the image itself does not say.

Inside the image the runtime leaves marks: Podman writes /run/.containerenv in every
container (podman-run(1), DESCRIPTION), Apptainer keeps its /.singularity.d
and sets APPTAINER_CONTAINER, Docker writes /.dockerenv. Enroot (under CSCS's Container
Engine and Pyxis) writes none of them, so a container without any mark is taken for enroot,
as CSCS's own images decide it (eth-cscs/alps-extended-images,
Alps-Images/ROCm/pytorch-rocm10.0-ubuntu24.04-py3.12-torch2.13/hooks.d/10-rccl-p2p-workaround.sh).
From the host, the launch names the runtime (validate's launcher, doctor's --runtime) or the
site profile implies it: the artifact its runtime consumes first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENROOT, PODMAN, APPTAINER, DOCKER = "enroot", "podman", "apptainer", "docker"
RUNTIMES = (ENROOT, PODMAN, APPTAINER, DOCKER)
#: The site's first artifact format -> the runtime that runs it: CSCS's Container Engine
#: (enroot) imports .sqsh images, Apptainer runs .sif files.
RUNTIME_OF_FORMAT = {"sqsh": ENROOT, "sif": APPTAINER}


@dataclass(frozen=True)
class Runtime:
    name: str | None  # one of RUNTIMES; None: not known
    evidence: str  # what says so, for the finding's reason


def in_container(root: Path, env: Mapping[str, str]) -> Runtime:
    """The runtime of the container whose files are under ``root``."""
    if (root / "run/.containerenv").exists():
        return Runtime(PODMAN, "/run/.containerenv (Podman writes it in every container)")
    if (root / ".singularity.d").is_dir() or env.get("APPTAINER_CONTAINER") \
            or env.get("SINGULARITY_CONTAINER"):
        return Runtime(APPTAINER, "Apptainer's /.singularity.d")
    if (root / ".dockerenv").exists():
        return Runtime(DOCKER, "/.dockerenv")
    return Runtime(ENROOT, "no Podman, Apptainer or Docker mark in the container (enroot "
                           "writes none)")


def named(runtime: str | None, where: str) -> Runtime:
    """The runtime a launch or profile names ("container-engine", "skybox" and "sarus"
    are CSCS's names for enroot and Podman)."""
    aliases = {"container-engine": ENROOT, "ce": ENROOT, "pyxis": ENROOT, "skybox": PODMAN,
               "sarus": PODMAN, "sarus-suite": PODMAN, "singularity": APPTAINER}
    name = aliases.get((runtime or "").lower(), (runtime or "").lower() or None)
    return Runtime(name if name in RUNTIMES else None, where)


def job_nodes(env: Mapping[str, str]) -> int | None:
    """The nodes of the SLURM job this runs in (None outside a job)."""
    for key in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES"):
        value = env.get(key, "").strip()
        if value.isdigit():
            return int(value)
    return None
