"""What a plan needs from outside its recipe and lock, resolved once: the site profiles the
recipe names and the project files its components' sections name."""

from __future__ import annotations

from pathlib import Path

from imagebuild import components
from imagebuild.components.protocol import PlanInputs
from imagebuild.errors import ImagebuildError, RenderError, short_path
from imagebuild.project import project_dir
from imagebuild.recipe.model import Recipe
from imagebuild.recipe.site import SiteProfile, load_site
from imagebuild.recipe.site_runtime import refuse_too_new


def plan_inputs(recipe: Recipe, project: Path | None = None) -> PlanInputs:
    """The inputs of ``recipe``'s plan. Its sites come from the recipe's own project (a
    recipe is judged against the sites beside it, wherever the command runs); the files its
    sections name, from ``project`` (default: the command's project)."""
    project = project or project_dir()
    files: dict[str, str] = {}
    for component, section in components.enabled(recipe):
        for wanted in component.project_files(section):
            path = project / wanted.path
            if not path.is_file():
                raise RenderError(f"{short_path(recipe.path)}: {wanted.key}: {path} is not a "
                                  f"file ({wanted.hint})")
            files[wanted.path] = path.read_text(encoding="utf-8")
    return PlanInputs(project=project, sites=tuple(_sites(recipe)), files=files)


def _sites(recipe: Recipe) -> list[SiteProfile]:
    project = recipe.path.resolve().parent.parent
    sites = []
    for name in recipe.sites:
        try:
            sites.append(load_site(name, project))
        except ImagebuildError as exc:
            raise RenderError(f"{short_path(recipe.path)}: sites: {name}: {exc}",
                              hint="name a profile in imagebuild/data/sites/ or the "
                                   "project's sites/ directory") from exc
        # A recipe may not name a site whose driver does not run its ROCm.
        refuse_too_new(sites[-1], recipe.rocm, f"{short_path(recipe.path)}: sites: ")
    return sites
