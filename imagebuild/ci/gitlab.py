"""The GitLab CI file: per recipe a build job (stage build, build runner tags), a validation
job (stage test, GPU runner tags) that takes the build job's result as an artifact, and on
git tags a promote job (stage deploy, one at a time); their ``rules: changes`` list that
recipe's own files and its parents (so the file is regenerated when a recipe is added); and
a check job that runs whenever any image job does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from imagebuild.ci import compile_job
from imagebuild.ci.config import CIConfig, CompileJob
from imagebuild.ci.image_job import (
    ARTIFACTS_DIR,
    BUILD_RESULT,
    LOGS,
    build_lines,
    image_files,
    promote_lines,
    validate_lines,
)
from imagebuild.ci.inputs import RecipeInputs
from imagebuild.ci.yaml_text import dump, shell_script

#: Where ``imagebuild ci`` writes it; a project includes it from its .gitlab-ci.yml.
GITLAB_FILE = "ci/gitlab/imagebuild.gitlab-ci.yml"
#: The default branch and tags write (stage cache, tested markers); merge requests read.
TRUSTED = ['TRUSTED=false',
           ('if [ "${CI_COMMIT_BRANCH:-}" = "$CI_DEFAULT_BRANCH" ] || '
           '[ -n "${CI_COMMIT_TAG:-}" ]; then TRUSTED=true; fi')]


def _gitlab_paths(paths: Iterable[str]) -> list[str]:
    # GitLab matches with Ruby's File.fnmatch, where a trailing ** is one level only.
    return [p[:-2] + "**/*" if p.endswith("/**") else p for p in paths]


def _variables(config: CIConfig) -> dict[str, str]:
    variables = {"IMAGEBUILD_INSTALL": config.install, "PYTHONUNBUFFERED": "1"}
    if config.registry:  # credentials: the project's CI variables of the same names
        variables["IMAGEBUILD_REGISTRY"] = config.registry
    else:  # the project's own registry, with the job's own credentials
        variables.update(IMAGEBUILD_REGISTRY="$CI_REGISTRY_IMAGE",
                         IMAGEBUILD_REGISTRY_USER="$CI_REGISTRY_USER",
                         IMAGEBUILD_REGISTRY_PASSWORD="$CI_REGISTRY_PASSWORD")
    if config.site.profile:
        variables["IMAGEBUILD_SITE"] = config.site.profile
    return variables


def _template(stage: str, tags: Sequence[str], hours: int, script: list[str],
              artifacts: dict[str, Any], *, trusted: bool = True) -> dict[str, Any]:
    job: dict[str, Any] = {"extends": ".imagebuild", "stage": stage}
    if tags:
        job["tags"] = list(tags)
    job["timeout"] = f"{hours}h"
    job["script"] = ["set -o pipefail", *(TRUSTED if trusted else []), *script]
    job["artifacts"] = artifacts
    return job


def _artifacts(config: CIConfig, name: str, paths: list[str]) -> dict[str, Any]:
    return {"name": name, "when": "always", "expire_in": f"{config.retention_days} days",
            "paths": paths}


def gitlab_pipeline(inputs: Sequence[RecipeInputs], config: CIConfig,
                    stage_recipes: Mapping[str, Iterable[str]] | None = None) -> str:
    """``stage_recipes``: compile job stage (hipblaslt, rccl) -> the recipes that build that
    stage; with the registry cache their build jobs start after the compile job, whose stage
    they import."""
    stage_recipes = {stage: set(names) for stage, names in (stage_recipes or {}).items()}
    force = {"if": '$IMAGEBUILD_ALL == "true"'}
    everything = _gitlab_paths(dict.fromkeys(
        [*config.rebuild_all_on, *(p for item in inputs for p in item.paths)]))
    template: dict[str, Any] = {
        "variables": _variables(config),
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

    validate_tags = config.gitlab.gpu_tags if config.validate_gpu else config.gitlab.build_tags
    report_paths = [f"{LOGS}/", f"{ARTIFACTS_DIR}/$RECIPE.toml"]
    if config.upload_images:
        report_paths += image_files(config, "$RECIPE")
    pipeline: dict[str, Any] = {
        ".imagebuild": template, "imagebuild:check": check,
        ".imagebuild:build": _template(
            "build", config.gitlab.build_tags, config.timeout_hours,
            ['imagebuild lock --check --strict "$RECIPE"', 'imagebuild render --check "$RECIPE"',
             *build_lines(config)],
            _artifacts(config, "imagebuild-$RECIPE-build", [BUILD_RESULT, f"{LOGS}/build.log"]),
            trusted=bool(config.cache)),
        ".imagebuild:validate": _template(
            "test", validate_tags, config.timeout_hours, validate_lines(config),
            _artifacts(config, "imagebuild-$RECIPE", report_paths), trusted=config.promote),
    }
    if config.promote:
        promote = _template("deploy", config.gitlab.build_tags, 1, promote_lines(),
                            _artifacts(config, "imagebuild-$RECIPE-promote", [f"{LOGS}/"]),
                            trusted=False)
        promote["resource_group"] = "imagebuild-promote"  # a registry cannot compare-and-set
        pipeline[".imagebuild:promote"] = promote
    for item in inputs:
        rules = [force, {"changes": {"paths": _gitlab_paths([*item.paths,
                                                              *config.rebuild_all_on])}}]
        needs: list[dict[str, Any]] = [{"job": "imagebuild:check", "optional": True}]
        # with the cache, the compile jobs whose stage it shares: it imports what they exported
        needs += [{"job": f"imagebuild:{job.stage}", "optional": True}
                  for job in config.compile_jobs()
                  if config.cache and item.name in stage_recipes.get(job.stage, ())]
        # the matrix's axes, as GitHub's carries them: the ROCm version and the Python
        axes = {"RECIPE": item.name, "ROCM": item.rocm or "cpu", "PYTHON": item.python}
        pipeline[f"imagebuild:build:{item.name}"] = {
            "extends": ".imagebuild:build", "variables": axes,
            "needs": needs, "rules": rules}
        built = {"job": f"imagebuild:build:{item.name}", "artifacts": True}
        pipeline[f"imagebuild:validate:{item.name}"] = {
            "extends": ".imagebuild:validate", "variables": axes,
            "needs": [built], "rules": rules}
        if config.promote:
            pipeline[f"imagebuild:promote:{item.name}"] = {
                "extends": ".imagebuild:promote",
                "variables": {"RECIPE": item.name, "STABLE_TAG": "$CI_COMMIT_TAG"},
                "needs": [built, {"job": f"imagebuild:validate:{item.name}",
                                  "artifacts": False}],
                "rules": [{"if": "$CI_COMMIT_TAG"}]}
    for job in config.compile_jobs():
        item = next(i for i in inputs if i.name == job.recipe)
        pipeline[f"imagebuild:{job.stage}"] = _compile_job(config, job, item, force)
    return dump(pipeline)


def _compile_job(config: CIConfig, job: CompileJob, item: RecipeInputs,
                 force: dict[str, str]) -> dict[str, Any]:
    """The real compile of a recipe's stage, started when its recipe's image job is."""
    logs = compile_job.log_dir()
    entry: dict[str, Any] = {
        "extends": ".imagebuild",
        "stage": "build",
        "needs": [{"job": "imagebuild:check", "optional": True}],
    }
    if config.tags_of(job):
        entry["tags"] = list(config.tags_of(job))
    entry["timeout"] = f"{job.hours}h"
    entry["variables"] = compile_job.job_variables(job)
    entry["script"] = [
        "set -o pipefail",
        *(TRUSTED if config.cache else []),
        shell_script(*compile_job.resources_check(config, job)),
        'imagebuild lock --check --strict "$RECIPE"',
        f'mkdir -p "{logs}"',
        *compile_job.build_lines(config, job),
    ]
    entry["artifacts"] = {"name": f"imagebuild-$RECIPE-{job.stage}", "when": "always",
                          "expire_in": f"{config.retention_days} days", "paths": [f"{logs}/"]}
    entry["rules"] = [force, {"changes": {
        "paths": _gitlab_paths([*item.paths, *config.rebuild_all_on])}}]
    return entry
