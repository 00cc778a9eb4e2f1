"""The GitHub Actions workflow, and actionlint's configuration for it.

GitHub ``paths`` filters cannot differ per matrix entry, so a first job (plan) runs
``imagebuild ci affected`` and hands the matrix to the image jobs. The workflow lists no
recipe at all: adding one needs no regeneration.

Per recipe: ``build`` on a build runner (no GPU label) builds with the registry's stage
cache and pushes; ``validate`` on a GPU runner pulls that digest (the build job's result,
an artifact: a matrix job has no per-entry outputs), validates and squashes it, and marks
it tested; on a git tag, ``promote`` gives it the tag as its stable tag, one promotion at a
time. A matrix job waits for every entry of the one before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imagebuild.ci import compile_job
from imagebuild.ci.config import CIConfig, CompileJob
from imagebuild.ci.image_job import (
    ARTIFACTS_DIR,
    build_lines,
    image_files,
    promote_lines,
    validate_lines,
)
from imagebuild.ci.yaml_text import dump, shell_script

#: actionlint's config (custom runner labels). Never inside .github/workflows, where GitHub
#: would take every YAML file for a workflow.
ACTIONLINT_CONFIG = "ci/actionlint.yaml"

# Pinned by major version: the tags GitHub documents. Projects that pin actions by commit
# can rewrite these in review; they are the only external code the workflow runs.
CHECKOUT_ACTION = "actions/checkout@v4"
UPLOAD_ACTION = "actions/upload-artifact@v4"
DOWNLOAD_ACTION = "actions/download-artifact@v4"

MATRIX = "${{ fromJSON(needs.plan.outputs.matrix) }}"
#: Pull requests from forks never reach the self-hosted build and GPU runners: their code
#: would run there with the runner's access.
NOT_A_FORK = ("(github.event_name != 'pull_request' || "
              "github.event.pull_request.head.repo.full_name == github.repository)")
#: The default branch and tags write (stage cache, tested markers); pull requests only read.
TRUSTED = ("${{ github.event_name != 'pull_request' && (github.ref == "
           "format('refs/heads/{0}', github.event.repository.default_branch) || "
           "startsWith(github.ref, 'refs/tags/')) }}")
BUILD_RESULT_ARTIFACT = "imagebuild-${{ matrix.recipe }}-build"


def _trigger_paths(config: CIConfig) -> list[str]:
    """Everything whose change may affect an image; the plan job narrows it per recipe."""
    return list(dict.fromkeys(["recipes/**", "dockerfiles/**", "envs/**",
                               *config.rebuild_all_on]))


def _registry_env(config: CIConfig) -> dict[str, str]:
    """The registry's credentials: the project's secrets, or the job's own for GHCR."""
    if config.registry:
        return {"IMAGEBUILD_REGISTRY_USER": "${{ secrets.IMAGEBUILD_REGISTRY_USER }}",
                "IMAGEBUILD_REGISTRY_PASSWORD": "${{ secrets.IMAGEBUILD_REGISTRY_PASSWORD }}"}
    return {"IMAGEBUILD_REGISTRY_USER": "${{ github.actor }}",
            "IMAGEBUILD_REGISTRY_PASSWORD": "${{ secrets.GITHUB_TOKEN }}"}


def _common_steps(config: CIConfig) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [{"uses": CHECKOUT_ACTION}, _install_step()]
    if not config.registry:
        steps.append({"name": "The repository's own registry",
                      # GHCR names are lower case; GitHub's expressions cannot lower a string
                      "run": 'echo "IMAGEBUILD_REGISTRY=ghcr.io/${GITHUB_REPOSITORY,,}" >> '
                             '"$GITHUB_ENV"\n'})
    return steps


def _install_step() -> dict[str, Any]:
    # A venv from the runner's python3: self-hosted GPU nodes rarely allow setup-python.
    return {"name": "Install imagebuild",
            "run": shell_script('python3 -m venv "$RUNNER_TEMP/imagebuild"',
                                '"$RUNNER_TEMP/imagebuild/bin/pip" install --quiet '
                                '"$IMAGEBUILD_INSTALL"',
                                'echo "$RUNNER_TEMP/imagebuild/bin" >> "$GITHUB_PATH"')}


def _download_build_result() -> dict[str, Any]:
    return {"name": "The build job's result", "uses": DOWNLOAD_ACTION,
            "with": {"name": BUILD_RESULT_ARTIFACT,
                     "path": f"{ARTIFACTS_DIR}/${{{{ matrix.recipe }}}}"}}


def _matrix_job(config: CIConfig, name: str, runner: Sequence[str], condition: str,
                needs: list[str], steps: list[dict[str, Any]], *, hours: int | None = None,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    strategy: dict[str, Any] = {"fail-fast": False}
    if config.github.max_parallel:
        strategy["max-parallel"] = config.github.max_parallel
    strategy["matrix"] = MATRIX
    job: dict[str, Any] = {"name": f"{name} ${{{{ matrix.recipe }}}} "
                                   "(Python ${{ matrix.python }})",
                           "needs": needs[0] if len(needs) == 1 else needs,
                           "if": condition, "runs-on": _runs_on(runner)}
    job["timeout-minutes"] = (hours or config.timeout_hours) * 60
    job["strategy"] = strategy
    job["env"] = {"RECIPE": "${{ matrix.recipe }}", **_registry_env(config), **(env or {})}
    job["steps"] = steps
    return job


def github_workflow(config: CIConfig) -> str:
    paths = _trigger_paths(config)
    images_if = f"needs.plan.outputs.any == 'true' && {NOT_A_FORK}"
    validate_runner = config.github.gpu_runner if config.validate_gpu \
        else config.github.build_runner
    upload_build = {"name": "Upload the build result and log", "if": "always()",
                    "uses": UPLOAD_ACTION,
                    "with": {"name": BUILD_RESULT_ARTIFACT,
                             "path": shell_script(
                                 f"{ARTIFACTS_DIR}/${{{{ matrix.recipe }}}}/build.json",
                                 f"{ARTIFACTS_DIR}/${{{{ matrix.recipe }}}}/build.log"),
                             "if-no-files-found": "warn",
                             "retention-days": config.retention_days}}
    build_needs = ["plan"]
    build_if = images_if
    if config.compile_jobs() and config.cache:
        # the recipes sharing its stage import what the compile job exported
        build_needs = ["plan", *(job.stage for job in config.compile_jobs())]
        build_if = f"!cancelled() && {images_if}"
    build = _matrix_job(config, "build", config.github.build_runner, build_if, build_needs, [
        *_common_steps(config),
        {"name": "Lock check", "run": 'imagebuild lock --check --strict "$RECIPE"'},
        {"name": "Render check", "run": 'imagebuild render --check "$RECIPE"'},
        {"name": "Build with the stage cache and push", "run": shell_script(*build_lines(config))},
        upload_build])
    validate_steps = [
        *_common_steps(config), _download_build_result(),
        {"name": "Pull by digest, validate" + ("" if config.validate_gpu else " (CPU mode)")
         + (", squash" if config.site.squash else "")
         + (", mark tested" if config.promote else ""),
         "run": shell_script(*validate_lines(config))},
        {"name": "Upload reports and logs", "if": "always()", "uses": UPLOAD_ACTION,
         "with": {"name": "imagebuild-${{ matrix.recipe }}-reports",
                  "path": shell_script(f"{ARTIFACTS_DIR}/${{{{ matrix.recipe }}}}/",
                                       f"{ARTIFACTS_DIR}/${{{{ matrix.recipe }}}}.toml"),
                  "if-no-files-found": "warn", "retention-days": config.retention_days}}]
    if config.upload_images:
        validate_steps.append({
            "name": "Upload images", "uses": UPLOAD_ACTION,
            "with": {"name": "imagebuild-${{ matrix.recipe }}-images",
                     "path": shell_script(*image_files(config, "${{ matrix.recipe }}")),
                     "if-no-files-found": "error",
                     # squashfs is compressed already: zipping it again only costs time.
                     "compression-level": 0, "retention-days": config.retention_days}})
    jobs: dict[str, Any] = {
        "plan": _plan_job(config),
        "build": build,
        "validate": _matrix_job(config, "validate", validate_runner,
                                f"!cancelled() && {images_if}", ["plan", "build"],
                                validate_steps),
    }
    if config.promote:
        promote = _matrix_job(
            config, "promote", config.github.build_runner,
            f"!cancelled() && {images_if} && startsWith(github.ref, 'refs/tags/')",
            ["plan", "validate"], [*_common_steps(config), _download_build_result(),
                                   {"name": "Promote the tested image to the git tag",
                                    "run": shell_script(*promote_lines())}],
            hours=1, env={"STABLE_TAG": "${{ github.ref_name }}"})
        # one promotion at a time: a registry cannot compare-and-set a tag
        promote["concurrency"] = {"group": "imagebuild-promote", "cancel-in-progress": False}
        jobs["promote"] = promote
    for job in config.compile_jobs():
        jobs[job.stage] = _compile_job(config, job, images_if)
    permissions = {"contents": "read"}
    if not config.registry:
        permissions["packages"] = "write"  # GITHUB_TOKEN pushes to the repository's GHCR
    env = {"IMAGEBUILD_INSTALL": config.install, "PYTHONUNBUFFERED": "1", "TRUSTED": TRUSTED}
    if config.registry:
        env["IMAGEBUILD_REGISTRY"] = config.registry
    if config.site.profile:
        env["IMAGEBUILD_SITE"] = config.site.profile
    workflow = {
        "name": "imagebuild",
        "on": {
            # a tag's push ignores the paths: a release promotes every tested image
            "push": {"branches": ["**"], "tags": ["*"], "paths": paths},
            "pull_request": {"paths": paths},
            "workflow_dispatch": {"inputs": {"recipes": {
                "description": "Recipes to build, space-separated (empty: all)",
                "type": "string", "required": False, "default": ""}}},
        },
        "permissions": permissions,
        "concurrency": {"group": "imagebuild-${{ github.ref }}",
                        "cancel-in-progress": "${{ github.event_name == 'pull_request' }}"},
        "env": env,
        # An explicit bash runs steps with -eo pipefail: a failed build is not hidden by tee.
        "defaults": {"run": {"shell": "bash"}},
        "jobs": jobs,
    }
    return dump(workflow, spaced_sections=["jobs"])


def _plan_job(config: CIConfig) -> dict[str, Any]:
    return {
        "name": "Affected recipes",
        "runs-on": _runs_on(config.github.plan_runner),
        "timeout-minutes": 15,
        "outputs": {"matrix": "${{ steps.affected.outputs.matrix }}",
                    "any": "${{ steps.affected.outputs.any }}"},
        "steps": [
            # Full history: the diff against the base needs their merge base.
            {"uses": CHECKOUT_ACTION, "with": {"fetch-depth": 0}},
            _install_step(),
            {"name": "Generated pipelines are current", "run": "imagebuild ci --check"},
            {"name": "Work out the affected recipes", "id": "affected",
             "env": {"BASE": "${{ github.event.pull_request.base.sha || github.event.before }}",
                     "REQUESTED": "${{ inputs.recipes }}"},
             "run": shell_script('imagebuild ci affected --base "$BASE" '
                                 '--recipes "$REQUESTED" --github-output')},
        ],
    }


def _compile_job(config: CIConfig, job: CompileJob, images_if: str) -> dict[str, Any]:
    """The real compile of a recipe's stage: started when its recipe is among the plan's."""
    logs = compile_job.log_dir()
    env = compile_job.job_variables(job)
    if config.cache:
        env.update(_registry_env(config))
    return {
        "name": compile_job.job_title(job),
        "needs": "plan",
        "if": f"{images_if} && contains(fromJSON(needs.plan.outputs.matrix).include.*.recipe, "
              f"'{job.recipe}')",
        "runs-on": _runs_on(config.runner_of(job)),
        "timeout-minutes": job.hours * 60,
        "env": env,
        "steps": [
            {"name": "The runner has the memory and disk the compile needs",
             "run": shell_script(*compile_job.resources_check(config, job))},
            *(_common_steps(config) if config.cache else
              [{"uses": CHECKOUT_ACTION}, _install_step()]),
            {"name": "Lock check", "run": 'imagebuild lock --check --strict "$RECIPE"'},
            {"name": f"Build the {job.stage} stage",
             "run": shell_script(f'mkdir -p "{logs}"',
                                 *compile_job.build_lines(config, job))},
            {"name": "Upload the log",
             "if": "always()",
             "uses": UPLOAD_ACTION,
             "with": {"name": f"imagebuild-${{{{ env.RECIPE }}}}-{job.stage}",
                      "path": f"{ARTIFACTS_DIR}/${{{{ env.RECIPE }}}}/",
                      "if-no-files-found": "warn",
                      "retention-days": config.retention_days}},
        ],
    }


def _runs_on(labels: Sequence[str]) -> str | list[str]:
    return labels[0] if len(labels) == 1 else list(labels)


def actionlint_config(config: CIConfig) -> str:
    """actionlint refuses runner labels it does not know unless its config lists them."""
    known = {"ubuntu-latest", "ubuntu-22.04", "ubuntu-20.04", "self-hosted", "linux", "x64",
             "arm64", "arm"}
    labels = [label for label in dict.fromkeys([*config.github.plan_runner,
                                                *config.github.build_runner,
                                                *config.github.gpu_runner,
                                                *config.github.hipblaslt_runner,
                                                *config.github.rccl_runner])
              if label not in known]
    return dump({"self-hosted-runner": {"labels": labels}})
