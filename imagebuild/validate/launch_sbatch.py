"""``imagebuild validate --launcher sbatch``: a batch script that runs the checks on every
rank of a SLURM job, bound the way a training job should be.

One task per GPU (``--ntasks-per-node``; two per node without GPUs), each with
``--cpus-per-task`` cores bound by ``srun --cpu-bind`` (``cores``, or one ``mask_cpu`` per
local rank as LUMI documents for its MI250X nodes:
https://docs.lumi-supercomputer.eu/runjobs/scheduled-jobs/lumig-job/), and each seeing
the GPU of its local rank (``ROCR_VISIBLE_DEVICES``/``CUDA_VISIBLE_DEVICES`` =
``SLURM_LOCALID``, or ``--gpus-per-task=1 --gpu-bind=closest``). torch.distributed's
RANK/WORLD_SIZE/LOCAL_RANK come from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, the
rendezvous host is the first host of the allocation. The script is plain bash that
shellcheck accepts; the checks run in this Python environment (a copy of the checks
package staged beside the script), in a .sif through apptainer or singularity, or in a
CSCS Container Engine environment.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagebuild.errors import ValidateError
from imagebuild.recipe.site_runtime import CPU_BIND, DISTRIBUTION, GPU_SELECTIONS, IFNAME
from imagebuild.validate.invocation import LOADER_PREFIX_SCRIPT
from imagebuild.validate.launch_apptainer import apptainer_gpu_flags
from imagebuild.validate.sbatch_screen import (
    SCREEN_SRUN,
    SCREENED_SRUN,
    screen_lines,
    screened_tasks,
)
from imagebuild.validate.stage_checks import IMAGE_LIB, IMAGE_PACKAGE, stage

if TYPE_CHECKING:
    from imagebuild.validate.invocation import Invocation
    from imagebuild.validate.target import Target

#: The GPU visibility variable each runtime reads. ROCR_VISIBLE_DEVICES (not HIP_...): it
#: is applied below HIP, so HIP's own numbering starts at 0 in every rank.
VISIBLE_DEVICES_VAR = {"rocm": "ROCR_VISIBLE_DEVICES", "nvidia": "CUDA_VISIBLE_DEVICES"}
#: Ranks per node without GPUs: what the CPU collectives and train checks need.
CPU_TASKS_PER_NODE = 2
#: Cores per rank with GPUs when not given: fits every node this project targets (LUMI-G
#: has 56 usable cores for 8 GCDs, MI300A/MI300X nodes more).
GPU_CPUS_PER_TASK = 7

#: Rendezvous on the first host of the allocation. awk, not head: head would close the
#: pipe early and, under pipefail, end the job on scontrol's SIGPIPE.
RENDEZVOUS = """\
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | awk 'NR == 1')
MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))  # two jobs sharing a node: two ports
export MASTER_ADDR MASTER_PORT
export IMAGEBUILD_VALIDATE_LAUNCHER=slurm
export OMP_NUM_THREADS=$SLURM_CPUS_PER_TASK"""
SOCKET_IFNAME_WHY = """\
# The interfaces for bootstrap and rendezvous sockets. Without GLOO_SOCKET_IFNAME gloo
# uses the address the host name resolves to, which fails on large jobs."""
#: One doctor per node, inside the image, before the checks (imagebuild doctor).
DOCTOR_SRUN = ("srun", "--ntasks-per-node=1", "--cpus-per-task=1")
DOCTOR_WHY = """\
# Preflight on every node: imagebuild doctor inside the image (driver, GPU targets, XNACK,
# libfabric, host ROCm mounts, SMI libraries, MIOpen's cache). A node that does not fit
# the image ends the job here, before the checks (imagebuild validate --no-doctor leaves
# this step out)."""
_ENV_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")


@dataclass(frozen=True)
class SbatchSpec:
    nodes: int = 2
    gpus_per_node: int = 8
    #: Ranks per node; None: one per GPU, or CPU_TASKS_PER_NODE without GPUs.
    ntasks_per_node: int | None = None
    #: Cores per rank; None: GPU_CPUS_PER_TASK with GPUs, 1 without.
    cpus_per_task: int | None = None
    cpu_bind: str = "cores"
    #: srun --distribution; None: block:block where ranks are bound by type (cores,
    #: threads...), SLURM's default (block:cyclic) otherwise (see distribution()).
    distribution: str | None = None
    #: #SBATCH --exclusive: whole nodes (binding is valid only there on shared partitions).
    exclusive: bool = False
    gpu_select: str = "local-id"
    #: NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (the site's high-speed interfaces).
    socket_ifname: str | None = None
    #: The site profile's environment (RCCL, libfabric), exported as the EDF would.
    site_env: tuple[tuple[str, str], ...] = ()
    time: str = "00:30:00"
    partition: str | None = None
    account: str | None = None
    environment: str | None = None  # CSCS Container Engine EDF name or path
    #: A Sarus Suite EDF (name or path) for Skybox's ``srun --edf``, the Container Engine's
    #: successor on Alps; exclusive with ``environment``.
    edf: str | None = None
    report_dir: str = "reports"
    #: Absolute report path; None: ``report_dir/validate-<job id>.json`` under the
    #: submission directory.
    report_path: str | None = None
    #: Run this checkout's checks (a copy staged beside the script) instead of the image's.
    mount_checks: bool = False
    #: Run ``imagebuild doctor`` in the image on every node first (GPU jobs in an image):
    #: the job stops there when a node does not fit the image.
    doctor: bool = True
    #: Screen every node first (imagebuild screen's node part) and run the checks on
    #: those that pass (sbatch_screen.py); the doctor's items are part of the screen.
    screen: bool = False
    #: Extra flags for the node screen (e.g. --memlock-min-gib 0).
    screen_args: tuple[str, ...] = ()
    #: srun options the site needs for a single-node job with this image (LUMI, ROCm 7:
    #: --network=single_node_vni); used only when ``nodes`` is 1.
    single_node_srun: tuple[str, ...] = ()

    def tasks_per_node(self, gpus: str) -> int:
        if self.ntasks_per_node:
            return self.ntasks_per_node
        return self.gpus_per_node if gpus != "none" else CPU_TASKS_PER_NODE

    def task_distribution(self, gpus: str) -> str | None:
        """srun --distribution. With GPUs and a binding type, block:block: SLURM's default
        deals a node's tasks round robin over its sockets (srun(1), --distribution, "Second
        distribution method": cyclic), so on a two-socket node rank 1, which gets GPU 1 (on
        the first socket, where GPUs 0-3 usually are), would run on the second socket;
        block fills one socket's cores with consecutive ranks first. Masks (mask_cpu) set
        each rank's cores themselves."""
        if self.distribution:
            return self.distribution
        if gpus != "none" and not self.cpu_bind.startswith(("mask_", "map_")) \
                and self.cpu_bind != "none":
            return "block:block"
        return None

    def cores_per_task(self, gpus: str) -> int:
        if self.cpus_per_task:
            return self.cpus_per_task
        return GPU_CPUS_PER_TASK if gpus != "none" else 1


def check_spec(spec: SbatchSpec) -> None:
    """One clear error per bad value, before any script is written."""
    if spec.environment and spec.edf:
        raise ValidateError("--environment and --edf: one runtime per job (the Container "
                            "Engine's EDF, or Sarus Suite's)")
    for name in ("nodes", "gpus_per_node", "ntasks_per_node", "cpus_per_task"):
        value = getattr(spec, name)
        if value is not None and value < 1:
            raise ValidateError(f"--{name.replace('_', '-')} {value}: expected an integer >= 1")
    if not CPU_BIND.match(spec.cpu_bind):
        raise ValidateError(f"--cpu-bind {spec.cpu_bind!r}: expected cores, threads, sockets, "
                            "none or mask_cpu:MASK,MASK,... (one mask per local rank)")
    if spec.gpu_select not in GPU_SELECTIONS:
        raise ValidateError(f"--gpu-select {spec.gpu_select!r}: choose from "
                            f"{', '.join(GPU_SELECTIONS)}")
    if spec.distribution is not None and not DISTRIBUTION.match(spec.distribution):
        raise ValidateError(f"--distribution {spec.distribution!r}: expected srun "
                            "--distribution values like block:block or block:cyclic")
    if spec.socket_ifname is not None and not IFNAME.match(spec.socket_ifname):
        raise ValidateError(f"--socket-ifname {spec.socket_ifname!r}: expected interface names "
                            "separated by commas (e.g. hsn0,hsn1 or lo)")


def shell_value(value: str) -> str:
    """A double-quoted bash word that keeps ``${NAME}`` references (expanded when the job
    runs, as the Container Engine expands them in an EDF) and nothing else."""
    parts: list[str] = []
    position = 0
    for match in _ENV_REF.finditer(value):
        parts.append(_escape(value[position:match.start()]) + match.group(0))
        position = match.end()
    parts.append(_escape(value[position:]))
    return '"' + "".join(parts) + '"'


def _escape(text: str) -> str:
    return re.sub(r'([\\"$`])', r"\\\1", text)


def sbatch_script(target: Target, invocation: Invocation, spec: SbatchSpec,
                  checks_dir: Path | None = None) -> str:
    """The batch script. ``checks_dir`` holds a staged copy of the checks (on a file system
    the compute nodes see): the checks the job runs without an image, or with
    ``spec.mount_checks``."""
    check_spec(spec)
    gpus = invocation.gpus
    tasks = spec.tasks_per_node(gpus)
    cores = spec.cores_per_task(gpus)
    lines = ["#!/bin/bash", "#SBATCH --job-name=imagebuild-validate",
             f"#SBATCH --nodes={spec.nodes}", f"#SBATCH --ntasks-per-node={tasks}",
             f"#SBATCH --cpus-per-task={cores}"]
    if gpus != "none":
        # closest: SLURM binds each task to one GPU through per-task device cgroups, which
        # (LUMI's docs warn) keeps RCCL from peer access between the GPUs of a node.
        lines.append("#SBATCH --gpus-per-task=1" if spec.gpu_select == "closest"
                     else f"#SBATCH --gpus-per-node={spec.gpus_per_node}")
    lines += [f"#SBATCH --time={spec.time}", "#SBATCH --output=imagebuild-validate-%j.out"]
    if spec.partition:
        lines.append(f"#SBATCH --partition={spec.partition}")
    if spec.account:
        lines.append(f"#SBATCH --account={spec.account}")
    if spec.exclusive:
        lines.append("#SBATCH --exclusive")
    lines += ["# Written by imagebuild validate --launcher sbatch.", "set -euo pipefail", ""]

    report = (shlex.quote(spec.report_path) if spec.report_path else
              f'"${{SLURM_SUBMIT_DIR}}/{spec.report_dir}/validate-${{SLURM_JOB_ID}}.json"')
    lines.append(f"report={report}")
    lines.append('mkdir -p "$(dirname "$report")"')
    lines += ["", *RENDEZVOUS.splitlines()]
    if spec.socket_ifname:
        lines += [*SOCKET_IFNAME_WHY.splitlines(),
                  f"export NCCL_SOCKET_IFNAME={shlex.quote(spec.socket_ifname)}",
                  f"export GLOO_SOCKET_IFNAME={shlex.quote(spec.socket_ifname)}"]
    site_env = [(k, v) for k, v in spec.site_env
                if not (spec.socket_ifname and k in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"))]
    if site_env:
        lines.append("# The site profile's environment (RCCL, libfabric).")
        lines += [f"export {key}={shell_value(value)}" for key, value in site_env]
    if invocation.env:
        lines.append("# Passed through from the environment imagebuild validate ran in.")
        lines += [f"export {key}={shlex.quote(value)}"
                  for key, value in sorted(invocation.env.items())]

    lines += ["", "# Each task: torch.distributed's variables from SLURM's"
              + (", and the GPU of its local rank." if gpus != "none" else ".")]
    lines += ["rank_setup=$(cat <<'EOF'",
              "export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID"]
    if gpus != "none" and spec.gpu_select == "local-id":
        lines.append(f"export {VISIBLE_DEVICES_VAR.get(gpus, 'ROCR_VISIBLE_DEVICES')}"
                     "=$SLURM_LOCALID")
    lines += ['exec "$@"', "EOF", ")"]

    # srun does not take --cpus-per-task from sbatch in Slurm 22.05 to 23.02: repeat it.
    srun = ["srun", f"--cpus-per-task={cores}", f"--cpu-bind=verbose,{spec.cpu_bind}"]
    site_srun = list(spec.single_node_srun) if spec.nodes == 1 else []
    srun += site_srun
    distribution = spec.task_distribution(gpus)
    if distribution:
        srun.append(f"--distribution={distribution}")
    if gpus != "none" and spec.gpu_select == "closest":
        srun.append("--gpu-bind=closest")
    if spec.screen:
        srun += [*SCREENED_SRUN, screened_tasks(tasks)]
    runner = [invocation.python, "-m", IMAGE_PACKAGE, *invocation.runner_args]
    screen_runner = [invocation.python, "-m", IMAGE_PACKAGE, "screen", *spec.screen_args,
                     *(["--cpu"] if gpus == "none" else [])]
    wrapped = ["bash", "-c", '"$rank_setup"', "imagebuild-rank"]
    before_command: list[str] = []
    doctor_runner = [invocation.python, "-m", IMAGE_PACKAGE, "doctor"]
    doctor: list[str] = []  # the in-image doctor, where the target is an image
    if target.kind == "environment":
        if checks_dir is None:
            raise ValidateError("--launcher sbatch without an image needs the staged checks")
        pythonpath = shlex.quote(str(checks_dir)) + "${PYTHONPATH:+:$PYTHONPATH}"
        lines.append(f"export PYTHONPATH={pythonpath}")
        if invocation.library_dir:
            lines += ["# The site's libfabric first on the loader path.",
                      f"export LD_LIBRARY_PATH={shlex.quote(invocation.library_dir)}"
                      + "${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"]
        command = [*srun, *wrapped, *_quoted(runner)]
        screen = [*SCREEN_SRUN, *_quoted(screen_runner)]
    elif target.kind == "sif":
        lines += ["# apptainer, or singularity where a site has only that.",
                  "runtime=$(command -v apptainer || command -v singularity || echo apptainer)",
                  f"export PYTHONPATH={IMAGE_LIB}"]
        exec_flags = _quoted(apptainer_gpu_flags(gpus, invocation.bind_host_rocm))
        for bind in invocation.binds:  # the site's: its libfabric, libcxi... (${VAR} kept)
            exec_flags += ["--bind", shell_value(bind.spec())]
        if spec.mount_checks and checks_dir is not None:
            exec_flags += ["--bind", shlex.quote(f"{checks_dir}:{IMAGE_LIB}:ro")]

        def in_sif(words: list[str]) -> list[str]:
            if invocation.library_dir:
                # The site's libfabric first on the loader path, after the image's
                # environment applies (apptainer --env would replace its LD_LIBRARY_PATH).
                words = ["/bin/sh", "-c", LOADER_PREFIX_SCRIPT, invocation.library_dir, *words]
            return ['"$runtime"', "exec", *exec_flags, shlex.quote(str(target.ref)),
                    *_quoted(words)]

        if invocation.library_dir:
            before_command = ["# The loader-path prefix expands inside the container.",
                              "# shellcheck disable=SC2016"]
        command = [*srun, *wrapped, *in_sif(runner)]
        doctor = [*DOCTOR_SRUN, *site_srun, *in_sif(doctor_runner)]
        screen = [*SCREEN_SRUN, *in_sif(screen_runner)]
    elif spec.environment or spec.edf:
        if spec.mount_checks and checks_dir is not None:
            lines += ["# This checkout's checks; the EDF must mount the file system they are on.",
                      f"export PYTHONPATH={shlex.quote(str(checks_dir))}"]
        else:
            lines.append(f"export PYTHONPATH={IMAGE_LIB}")
        # Skybox takes the EDF with --edf where Pyxis takes --environment (docs.cscs.ch,
        # "Sarus Suite & Podman on Alps", "Skybox: the Slurm Integration").
        environment = (f"--edf={shlex.quote(spec.edf)}" if spec.edf else
                       f"--environment={shlex.quote(spec.environment or '')}")
        command = [*srun, environment, *wrapped, *_quoted(runner)]
        doctor = [*DOCTOR_SRUN, *site_srun, environment, *_quoted(doctor_runner)]
        screen = [*SCREEN_SRUN, environment, *_quoted(screen_runner)]
    else:
        raise ValidateError(f"--launcher sbatch with image {target.ref}: name a Container Engine "
                            "environment (--environment NAME), a Sarus Suite EDF (--edf FILE) "
                            "or pass a .sif file")
    if spec.screen:
        lines += screen_lines(" ".join(screen), before_command)
    elif doctor and spec.doctor and gpus == "rocm":
        lines += ["", *DOCTOR_WHY.splitlines(), *before_command, " ".join(doctor)]
    lines += ["", *before_command, " ".join(command) + ' --report "$report"']
    return "\n".join(lines) + "\n"


def _quoted(words: Iterable[str]) -> list[str]:
    return [shlex.quote(w) for w in words]


def write_sbatch(target: Target, invocation: Invocation, spec: SbatchSpec, script: Path) -> Path:
    """Write the script (and the staged checks it needs, beside it); returns its path."""
    check_spec(spec)
    checks_dir = None
    if target.kind == "environment" or spec.mount_checks:
        checks_dir = stage(script.resolve().with_suffix(".checks"))
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(sbatch_script(target, invocation, spec, checks_dir))
    script.chmod(0o755)
    return script
