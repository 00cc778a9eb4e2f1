"""Everything ``imagebuild ci`` writes, and the check that the committed copies are current.

imagebuild generates the pipelines and never schedules anything itself: the CI system runs
one image job per recipe (one per ROCm version). Every generated file starts with a header
naming its inputs and their hash, so ``imagebuild ci --check`` (imagebuild.generated) names
the files that differ from what their inputs produce now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from imagebuild import generated
from imagebuild.ci.compile_job import TITLES, job_title
from imagebuild.ci.config import DEFAULT_CONFIG, CIConfig, CompileJob, load_ci_config
from imagebuild.ci.github import ACTIONLINT_CONFIG, actionlint_config, github_workflow
from imagebuild.ci.gitlab import GITLAB_FILE, gitlab_pipeline
from imagebuild.ci.inputs import RecipeInputs, recipe_inputs
from imagebuild.ci.yaml_text import comment
from imagebuild.components import enabled
from imagebuild.errors import CIConfigError, Problem, RecipeError
from imagebuild.files import canonical_digest
from imagebuild.recipe.load import load_all
from imagebuild.recipe.model import Recipe

#: Bump when the shape of the generated files changes for the same inputs.
GENERATOR_VERSION = 1
#: The command that regenerates the files, as their headers and stale messages name it.
REGENERATE = "imagebuild ci"


def render_ci(recipes: Sequence[Recipe], config: CIConfig, project: Path) -> dict[str, str]:
    """Project-relative path -> text of every generated CI file. Pure: no file is touched."""
    inputs = recipe_inputs(recipes, project)
    building = {job.stage: _building(recipes, job.stage) for job in config.compile_jobs()}
    for job in config.compile_jobs():
        _check_compile_job(job, recipes, building[job.stage], config)
    github_jobs = [line for job in config.compile_jobs() for line in (
        f"Job {job.stage}: {job_title(job)};", f"its runner: github.runners.{job.stage}.")]
    gitlab_jobs = [line for job in config.compile_jobs() for line in (
        f"Job imagebuild:{job.stage}: {job_title(job)};", f"its runner: gitlab.tags.{job.stage}.")]
    config_input = generated.Input(
        config.source or DEFAULT_CONFIG, _input_digest(config.to_dict()),
        "" if config.source else "imagebuild's defaults: no ci/config.yaml")
    recipe_inputs_ = []
    for item in inputs:
        recipe_file, *parents = _recipe_files(item)
        note = f"extends {', '.join(parents)}" if parents else ""
        recipe_inputs_.append(generated.Input(recipe_file, _input_digest(asdict(item)), note))
    return {
        config.github.workflow: generated.header([config_input], REGENERATE) + comment(
            "Recipes are not inputs: the plan job works out the affected ones at run time.",
            "Copy to .github/workflows/, or set github.workflow_dir in ci/config.yaml.",
            *_layout_lines(config),
            *github_jobs)
        + github_workflow(config),
        GITLAB_FILE: generated.header([*recipe_inputs_, config_input], REGENERATE) + comment(
            f"Include from .gitlab-ci.yml:  include: [{{local: {GITLAB_FILE}}}]",
            "Jobs per recipe, started when the recipe, a parent, its lock, its Dockerfile or",
            "its EDF file changes; IMAGEBUILD_ALL=true builds every image. Uses the default",
            "stages (.pre, build, test, deploy); image jobs need runners whose shell is bash.",
            *_layout_lines(config),
            *gitlab_jobs)
        + gitlab_pipeline(inputs, config, building),
        ACTIONLINT_CONFIG: generated.header([config_input], REGENERATE) + comment(
            f"Use with: actionlint -config-file {ACTIONLINT_CONFIG}")
        + actionlint_config(config),
    }


def _layout_lines(config: CIConfig) -> list[str]:
    """What the jobs do, for the reader of the generated file."""
    registry = config.registry or "the CI system's own registry"
    lines = [f"build: on build runners (no GPU), pushed by digest to {registry}"
             + (f", stage cache in <registry>/{config.cache}" if config.cache else "") + ";",
             "validate: pulls that digest on " + ("GPU runners" if config.validate_gpu else
                                                 "build runners (CPU mode)")
             + ", validates and squashes it"
             + ("; marks it <canonical-tag>-tested-<report hash>" if config.promote else "")
             + ";"]
    if config.promote:
        lines.append("promote (git tags): the tag as the stable tag of each tested image.")
    return lines


def _building(recipes: Sequence[Recipe], stage: str) -> list[str]:
    """The recipes whose component of that name (and stage) is on."""
    return sorted(r.name for r in recipes
                  if any(component.name == stage for component, _ in enabled(r)))


def _check_compile_job(job: CompileJob, recipes: Sequence[Recipe], building: list[str],
                       config: CIConfig) -> None:
    """A compile job's recipe must be one of the project's that builds its stage."""
    if job.recipe not in building:
        what = (f"has {job.stage}.enabled false" if job.recipe in {r.name for r in recipes}
                else "is not a recipe of this project")
        raise CIConfigError([Problem(
            Path(config.source or DEFAULT_CONFIG), None, f"{job.stage}_job.recipe",
            f"{job.recipe} {what}; recipes that build {TITLES[job.stage]}: "
            f"{', '.join(building) or 'none'} (null: no {TITLES[job.stage]} compile job)")])


def _input_digest(data: Any) -> str:
    """The hash a header records for one input; the generator version is part of it, so a
    change in the generated shape marks every file stale."""
    return canonical_digest({"generator": GENERATOR_VERSION, "data": data})


def _recipe_files(item: RecipeInputs) -> list[str]:
    """The recipe file and the parents it extends (the first paths of its inputs)."""
    return [p for p in item.paths if p.startswith("recipes/") and p.endswith(".yaml")]


def generated_files(project: Path, recipes: Sequence[Recipe] | None = None
                    ) -> list[generated.GeneratedFile]:
    """Everything ``imagebuild ci`` writes, from the project's recipes and configuration."""
    if recipes is None:
        recipes, errors = load_all(project)
        if errors:
            raise RecipeError([p for error in errors for p in error.problems])
    files = render_ci(recipes, load_ci_config(project), project)
    return [generated.GeneratedFile(project / path, text, REGENERATE)
            for path, text in files.items()]
