"""The real compile of a recipe's stage as a job of its own, the same in both pipelines: one
recipe's hipblaslt stage (`imagebuild build RECIPE --stage hipblaslt`), or its rccl stage
where the recipe pins RCCL apart from the base image, on a runner sized for it.

What the job needs is configuration (hipblaslt_job and rccl_job in imagebuild/data/ci.yaml)
and is stated where a reader of the pipeline sees it: the job's name, its variables, and a
first step that fails, naming both figures, on a runner with less memory or free disk than
that."""

from __future__ import annotations

from imagebuild.ci.config import CIConfig, CompileJob
from imagebuild.ci.image_job import ARTIFACTS_DIR, cache_lines, login

#: What each compile job is called for people.
TITLES = {"hipblaslt": "hipBLASLt", "rccl": "RCCL"}


def job_title(job: CompileJob) -> str:
    return (f"{TITLES[job.stage]} compile of {job.recipe} (needs {job.memory_gb} GB memory, "
            f"{job.disk_gb} GB free disk, up to {job.hours} h)")


def _prefix(job: CompileJob) -> str:
    return job.stage.upper()


def job_variables(job: CompileJob) -> dict[str, str]:
    return {"RECIPE": job.recipe, f"{_prefix(job)}_MEMORY_GB": str(job.memory_gb),
            f"{_prefix(job)}_DISK_GB": str(job.disk_gb)}


def resources_check(config: CIConfig, job: CompileJob) -> list[str]:
    """Shell lines: fail on a runner below the job's memory or the engine's free disk."""
    prefix = _prefix(job)
    root = ("docker info --format '{{.DockerRootDir}}'" if config.site.backend == "docker"
            else "podman info --format '{{.Store.GraphRoot}}'")
    return [
        f'root=$({root} 2>/dev/null || echo .)',
        "memory=$(awk '/^MemTotal:/ {print int($2 / 1048576)}' /proc/meminfo)",
        """free=$(df -Pk "$root" | awk 'NR == 2 {print int($4 / 1048576)}')""",
        ('echo "runner: $(nproc) CPUs, ${memory} GiB memory, ${free} GiB free in $root;'
         f' the job needs ${{{prefix}_MEMORY_GB}} GB and ${{{prefix}_DISK_GB}} GB"'),
        # GiB against GB: 93% (1e9 / 2**30) of the figure is the same amount.
        (f'if [ "$memory" -lt "$(({prefix}_MEMORY_GB * 93 / 100))" ] || '
         f'[ "$free" -lt "$(({prefix}_DISK_GB * 93 / 100))" ]; then'),
        (f'  echo "this runner is too small for the {TITLES[job.stage]} compile'
         f' ({job.stage}_job in ci/config.yaml)" >&2'),
        "  exit 1",
        "fi",
    ]


def log_dir() -> str:
    return f"{ARTIFACTS_DIR}/$RECIPE"


def build_lines(config: CIConfig, job: CompileJob) -> list[str]:
    """The stage build; the recipe comes from $RECIPE, the log goes beside the image jobs'.
    With the registry cache, the stage's entry is what the image jobs of every recipe with
    the same stage import."""
    stage = job.stage
    parts = [f'imagebuild build "$RECIPE" --stage {stage}', f"--backend {config.site.backend}"]
    if config.site.ca_certificate:
        parts.append(f"--site-ca {config.site.ca_certificate}")
    if not config.cache:
        return [" ".join(parts) + f' 2>&1 | tee "{log_dir()}/{stage}-stage.log"']
    parts.append('"${cache_args[@]}"')
    return [login(config), *cache_lines(config),
            " ".join(parts) + f' 2>&1 | tee "{log_dir()}/{stage}-stage.log"']
