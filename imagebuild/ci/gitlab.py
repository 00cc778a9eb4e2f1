"""The GitLab CI file: one image job per recipe, whose ``rules: changes`` lists that
recipe's own files and its parents (so the file is regenerated when a recipe is added),
and a check job that runs whenever any image job does."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from imagebuild.ci import hipblaslt_job
from imagebuild.ci.config import CIConfig
from imagebuild.ci.image_job import ARTIFACTS_DIR, build_command, image_files, validate_command
from imagebuild.ci.inputs import RecipeInputs
from imagebuild.ci.yaml_text import dump, shell_script

#: Where ``imagebuild ci`` writes it; a project includes it from its .gitlab-ci.yml.
GITLAB_FILE = "ci/gitlab/imagebuild.gitlab-ci.yml"


def _gitlab_paths(paths: Iterable[str]) -> list[str]:
    # GitLab matches with Ruby's File.fnmatch, where a trailing ** is one level only.
    return [p[:-2] + "**/*" if p.endswith("/**") else p for p in paths]


def gitlab_pipeline(inputs: Sequence[RecipeInputs], config: CIConfig) -> str:
    tags = config.gitlab.gpu_tags if config.validate_gpu else config.gitlab.build_tags
    logs = f"{ARTIFACTS_DIR}/$RECIPE"
    force = {"if": '$IMAGEBUILD_ALL == "true"'}
    everything = _gitlab_paths(dict.fromkeys(
        [*config.rebuild_all_on, *(p for item in inputs for p in item.paths)]))
    template: dict[str, Any] = {
        "variables": {"IMAGEBUILD_INSTALL": config.install, "PYTHONUNBUFFERED": "1"},
        "before_script": [
            'python3 -m venv "$CI_PROJECT_DIR/.imagebuild-venv"',
            '"$CI_PROJECT_DIR/.imagebuild-venv/bin/pip" install --quiet "$IMAGEBUILD_INSTALL"',
            'export PATH="$CI_PROJECT_DIR/.imagebuild-venv/bin:$PATH"',
        ],
    }
    check: dict[str, Any] = {"extends": ".imagebuild", "stage": ".pre"}
    if config.gitlab.image:
        check["image"] = config.gitlab.image
    if config.gitlab.check_tags:
        check["tags"] = list(config.gitlab.check_tags)
    check["script"] = ["imagebuild ci --check"]
    # The same paths as the union of the image jobs: it runs whenever one of them does.
    check["rules"] = [force, {"changes": {"paths": everything}}]

    script = ["set -o pipefail",
              'imagebuild lock --check --strict "$RECIPE"',
              'imagebuild render --check "$RECIPE"',
              f'mkdir -p "{logs}"']
    push_flag = ""
    if config.registry:
        script.append(shell_script(
            "push_args=()",
            # Only the default branch and tags publish; merge requests never push.
            'if [ "${CI_COMMIT_BRANCH:-}" = "$CI_DEFAULT_BRANCH" ] || '
            '[ -n "${CI_COMMIT_TAG:-}" ]; then',
            f'  printf \'%s\' "$IMAGEBUILD_REGISTRY_PASSWORD" | {config.site.backend} login '
            f'--username "$IMAGEBUILD_REGISTRY_USER" --password-stdin {config.registry_host}',
            '  push_args=(--push "$IMAGEBUILD_REGISTRY")',
            "fi"))
        push_flag = '"${push_args[@]}"'
    script.append(build_command(config, f"{logs}/build.log", push_flag))
    script.append(validate_command(config, f"{logs}/validate.json", f"{logs}/validate.log"))
    artifacts: dict[str, Any] = {
        "name": "imagebuild-$RECIPE",
        "when": "always",
        "expire_in": f"{config.retention_days} days",
        "paths": [f"{logs}/", f"{ARTIFACTS_DIR}/$RECIPE.toml"],
    }
    if config.upload_images:
        artifacts["paths"] += image_files(config, "$RECIPE")
    image: dict[str, Any] = {
        "extends": ".imagebuild",
        "stage": "build",
        "needs": [{"job": "imagebuild:check", "optional": True}],
    }
    if tags:
        image["tags"] = list(tags)
    image["timeout"] = f"{config.timeout_hours}h"
    variables = {}
    if config.registry:
        variables["IMAGEBUILD_REGISTRY"] = config.registry
    if config.site.profile:
        variables["IMAGEBUILD_SITE"] = config.site.profile
    if variables:
        image["variables"] = variables
    image["script"] = script
    image["artifacts"] = artifacts

    pipeline: dict[str, Any] = {".imagebuild": template, "imagebuild:check": check,
                                ".imagebuild:image": image}
    for item in inputs:
        pipeline[f"imagebuild:{item.name}"] = {
            "extends": ".imagebuild:image",
            "variables": {"RECIPE": item.name},
            "rules": [force, {"changes": {
                "paths": _gitlab_paths([*item.paths, *config.rebuild_all_on])}}],
        }
    if config.hipblaslt_job is not None:
        item = next(i for i in inputs if i.name == config.hipblaslt_job.recipe)
        pipeline["imagebuild:hipblaslt"] = _hipblaslt_job(config, item, force)
    return dump(pipeline)


def _hipblaslt_job(config: CIConfig, item: RecipeInputs, force: dict[str, str]
                   ) -> dict[str, Any]:
    """The real hipBLASLt compile, started when its recipe's image job is."""
    job = config.hipblaslt_job
    assert job is not None
    logs = hipblaslt_job.log_dir()
    compile_job: dict[str, Any] = {
        "extends": ".imagebuild",
        "stage": "build",
        "needs": [{"job": "imagebuild:check", "optional": True}],
    }
    if config.gitlab.hipblaslt_tags:
        compile_job["tags"] = list(config.gitlab.hipblaslt_tags)
    compile_job["timeout"] = f"{job.hours}h"
    compile_job["variables"] = hipblaslt_job.job_variables(job)
    compile_job["script"] = [
        "set -o pipefail",
        shell_script(*hipblaslt_job.resources_check(config)),
        'imagebuild lock --check --strict "$RECIPE"',
        f'mkdir -p "{logs}"',
        hipblaslt_job.build_line(config),
    ]
    compile_job["artifacts"] = {"name": "imagebuild-$RECIPE-hipblaslt", "when": "always",
                                "expire_in": f"{config.retention_days} days",
                                "paths": [f"{logs}/"]}
    compile_job["rules"] = [force, {"changes": {
        "paths": _gitlab_paths([*item.paths, *config.rebuild_all_on])}}]
    return compile_job
