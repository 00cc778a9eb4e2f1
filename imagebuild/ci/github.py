"""The GitHub Actions workflow, and actionlint's configuration for it.

GitHub ``paths`` filters cannot differ per matrix entry, so a first job (plan) runs
``imagebuild ci affected`` and hands the matrix to the image jobs. The workflow lists no
recipe at all: adding one needs no regeneration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imagebuild.ci import hipblaslt_job
from imagebuild.ci.config import CIConfig
from imagebuild.ci.image_job import ARTIFACTS_DIR, build_command, image_files, validate_command
from imagebuild.ci.yaml_text import dump, shell_script

#: actionlint's config (custom runner labels). Never inside .github/workflows, where GitHub
#: would take every YAML file for a workflow.
ACTIONLINT_CONFIG = "ci/actionlint.yaml"

# Pinned by major version: the tags GitHub documents. Projects that pin actions by commit
# can rewrite these in review; they are the only external code the workflow runs.
CHECKOUT_ACTION = "actions/checkout@v4"
UPLOAD_ACTION = "actions/upload-artifact@v4"


def _trigger_paths(config: CIConfig) -> list[str]:
    """Everything whose change may affect an image; the plan job narrows it per recipe."""
    return list(dict.fromkeys(["recipes/**", "dockerfiles/**", "envs/**",
                               *config.rebuild_all_on]))


def github_workflow(config: CIConfig) -> str:
    runner = config.github.gpu_runner if config.validate_gpu else config.github.build_runner
    logs = f"{ARTIFACTS_DIR}/$RECIPE"
    install = {
        "name": "Install imagebuild",
        # A venv from the runner's python3: self-hosted GPU nodes rarely allow setup-python.
        "run": shell_script('python3 -m venv "$RUNNER_TEMP/imagebuild"',
                       '"$RUNNER_TEMP/imagebuild/bin/pip" install --quiet "$IMAGEBUILD_INSTALL"',
                       'echo "$RUNNER_TEMP/imagebuild/bin" >> "$GITHUB_PATH"'),
    }
    paths = _trigger_paths(config)
    push = bool(config.registry)
    image_steps: list[dict[str, Any]] = [
        {"uses": CHECKOUT_ACTION},
        install,
        {"name": "Lock check", "run": 'imagebuild lock --check --strict "$RECIPE"'},
        {"name": "Render check", "run": 'imagebuild render --check "$RECIPE"'},
    ]
    if push:
        image_steps.append({
            "name": "Log in to the registry",
            "if": "env.PUSH == 'true'",
            "env": {"REGISTRY_USER": "${{ secrets.IMAGEBUILD_REGISTRY_USER }}",
                    "REGISTRY_PASSWORD": "${{ secrets.IMAGEBUILD_REGISTRY_PASSWORD }}"},
            "run": f'printf \'%s\' "$REGISTRY_PASSWORD" | {config.site.backend} login '
                   f'--username "$REGISTRY_USER" --password-stdin {config.registry_host}\n',
        })
    build_lines = [f'mkdir -p "{logs}"']
    if push:
        build_lines += ["push_args=()",
                        'if [ "$PUSH" = true ]; then push_args=(--push "$IMAGEBUILD_REGISTRY"); fi']
    build_lines.append(build_command(config, f"{logs}/build.log",
                                      '"${push_args[@]}"' if push else ""))
    image_steps += [
        {"name": "Build and squash", "run": shell_script(*build_lines)},
        {"name": "Validate" + ("" if config.validate_gpu else " (CPU mode)"),
         "run": validate_command(config, f"{logs}/validate.json",
                                  f"{logs}/validate.log") + "\n"},
        {"name": "Upload reports and logs",
         "if": "always()",
         "uses": UPLOAD_ACTION,
         "with": {"name": "imagebuild-${{ matrix.recipe }}-reports",
                  "path": shell_script(f"{ARTIFACTS_DIR}/${{{{ matrix.recipe }}}}/",
                                  f"{ARTIFACTS_DIR}/${{{{ matrix.recipe }}}}.toml"),
                  "if-no-files-found": "warn",
                  "retention-days": config.retention_days}},
    ]
    if config.upload_images:
        image_steps.append({
            "name": "Upload images",
            "uses": UPLOAD_ACTION,
            "with": {"name": "imagebuild-${{ matrix.recipe }}-images",
                     "path": shell_script(*image_files(config, "${{ matrix.recipe }}")),
                     "if-no-files-found": "error",
                     # squashfs is compressed already: zipping it again only costs time.
                     "compression-level": 0,
                     "retention-days": config.retention_days},
        })
    strategy: dict[str, Any] = {"fail-fast": False}
    if config.github.max_parallel:
        strategy["max-parallel"] = config.github.max_parallel
    strategy["matrix"] = "${{ fromJSON(needs.plan.outputs.matrix) }}"
    image_env: dict[str, str | None] = {"RECIPE": "${{ matrix.recipe }}"}
    if config.site.profile:
        image_env["IMAGEBUILD_SITE"] = config.site.profile
    if push:
        image_env["IMAGEBUILD_REGISTRY"] = config.registry
        # Pull requests never push (forks have no secrets; a review is not a release).
        image_env["PUSH"] = ("${{ github.event_name != 'pull_request' && (github.ref == "
                             "format('refs/heads/{0}', github.event.repository.default_branch)"
                             " || startsWith(github.ref, 'refs/tags/')) }}")
    workflow = {
        "name": "imagebuild",
        "on": {
            "push": {"paths": paths},
            "pull_request": {"paths": paths},
            "workflow_dispatch": {"inputs": {"recipes": {
                "description": "Recipes to build, space-separated (empty: all)",
                "type": "string", "required": False, "default": ""}}},
        },
        "permissions": {"contents": "read"},
        "concurrency": {"group": "imagebuild-${{ github.ref }}",
                        "cancel-in-progress": "${{ github.event_name == 'pull_request' }}"},
        "env": {"IMAGEBUILD_INSTALL": config.install, "PYTHONUNBUFFERED": "1"},
        # An explicit bash runs steps with -eo pipefail: a failed build is not hidden by tee.
        "defaults": {"run": {"shell": "bash"}},
        "jobs": {
            "plan": {
                "name": "Affected recipes",
                "runs-on": _runs_on(config.github.plan_runner),
                "timeout-minutes": 15,
                "outputs": {"matrix": "${{ steps.affected.outputs.matrix }}",
                            "any": "${{ steps.affected.outputs.any }}"},
                "steps": [
                    # Full history: the diff against the base needs their merge base.
                    {"uses": CHECKOUT_ACTION, "with": {"fetch-depth": 0}},
                    install,
                    {"name": "Generated pipelines are current", "run": "imagebuild ci --check"},
                    {"name": "Work out the affected recipes", "id": "affected",
                     "env": {"BASE": "${{ github.event.pull_request.base.sha || "
                                     "github.event.before }}",
                             "REQUESTED": "${{ inputs.recipes }}"},
                     "run": shell_script('imagebuild ci affected --base "$BASE" '
                                    '--recipes "$REQUESTED" --github-output')},
                ],
            },
            "images": {
                "name": "${{ matrix.recipe }}",
                "needs": "plan",
                # Pull requests from forks never reach the self-hosted build and GPU
                # runners: their code would run there with the runner's access.
                "if": ("needs.plan.outputs.any == 'true' && (github.event_name != "
                       "'pull_request' || github.event.pull_request.head.repo.full_name == "
                       "github.repository)"),
                "runs-on": _runs_on(runner),
                "timeout-minutes": config.timeout_hours * 60,
                "strategy": strategy,
                "env": image_env,
                "steps": image_steps,
            },
        },
    }
    if config.hipblaslt_job is not None:
        jobs: dict[str, Any] = workflow["jobs"]  # type: ignore[assignment]
        jobs["hipblaslt"] = _hipblaslt_job(config, install, jobs["images"]["if"])
    return dump(workflow, spaced_sections=["jobs"])


def _hipblaslt_job(config: CIConfig, install: dict[str, Any], images_if: str
                   ) -> dict[str, Any]:
    """The real hipBLASLt compile: started when its recipe is among the plan's."""
    job = config.hipblaslt_job
    assert job is not None
    logs = hipblaslt_job.log_dir()
    return {
        "name": hipblaslt_job.job_title(job),
        "needs": "plan",
        "if": f"{images_if} && contains(fromJSON(needs.plan.outputs.matrix).include.*.recipe, "
              f"'{job.recipe}')",
        "runs-on": _runs_on(config.github.hipblaslt_runner),
        "timeout-minutes": job.hours * 60,
        "env": hipblaslt_job.job_variables(job),
        "steps": [
            {"name": "The runner has the memory and disk the compile needs",
             "run": shell_script(*hipblaslt_job.resources_check(config))},
            {"uses": CHECKOUT_ACTION},
            install,
            {"name": "Lock check", "run": 'imagebuild lock --check --strict "$RECIPE"'},
            {"name": "Build the hipblaslt stage",
             "run": shell_script(f'mkdir -p "{logs}"', hipblaslt_job.build_line(config))},
            {"name": "Upload the log",
             "if": "always()",
             "uses": UPLOAD_ACTION,
             "with": {"name": "imagebuild-${{ env.RECIPE }}-hipblaslt",
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
                                                *config.github.hipblaslt_runner])
              if label not in known]
    return dump({"self-hosted-runner": {"labels": labels}})
