"""``imagebuild tune edf``: the EDF of a squashed image with a tuning bundle mounted.

Writes ``<name>-tuning.toml`` beside ``<name>.sqsh`` (``imagebuild build --tuning``'s
derived image has its own ``<recipe>-tuned.sqsh`` and ``.toml``): everything the plain EDF
of that image says (site mounts, environment, hooks; render.edf), plus the bundle bound read-only at
/opt/imagebuild/tuning and the variables that load it (tune.apply). Nothing is rebuilt or
re-squashed. A bundle tuned in another recipe, torch or hipBLASLt build is refused with
the field that differs.
"""

from __future__ import annotations

from pathlib import Path

from imagebuild.convert.artifacts import Artifact, existing_artifact, write_edf_beside
from imagebuild.errors import RecipeNotFound, TuneError
from imagebuild.inimage.tuning.bundle_format import Bundle
from imagebuild.lock.check import current_lock
from imagebuild.recipe.load import find_recipe, load_recipe, project_dir
from imagebuild.recipe.site import load_site
from imagebuild.render.edf import edf_workdir
from imagebuild.render.plan import plan_for

from .apply import DEFAULT_MOUNT_POINT, runtime_tuning
from .bundle import read_bundle
from .derive import checked_bundle


def write_tuned_edf(bundle_dir: Path, target: str, site_name: str, *,
                    output_dir: Path | None = None, mount_point: str | None = None,
                    rocm_version: str | None = None, name: str | None = None
                    ) -> tuple[Artifact, Bundle]:
    """``target``: a recipe name (its ``<output-dir>/<recipe>.sqsh``) or a .sqsh path
    (then ``rocm_version`` picks the site's hooks, as for ``imagebuild squash``)."""
    project = project_dir()
    recipe = None
    if target.endswith((".sqsh", ".squashfs")):
        sqsh_path = Path(target)
    else:
        try:
            find_recipe(target, project)
        except RecipeNotFound as exc:
            raise TuneError(f"tune edf: {target!r} is neither a recipe nor a .sqsh file "
                            f"({exc})") from None
        recipe = load_recipe(target, project)
        sqsh_path = (output_dir or project / "artifacts") / f"{recipe.name}.sqsh"
    if not sqsh_path.is_file():
        hint = (f"imagebuild squash {recipe.name} --site {site_name}" if recipe
                else "imagebuild squash IMAGE --site SITE")
        raise TuneError(f"{sqsh_path}: no squashfs image to point the EDF at", hint=hint)
    bundle = checked_bundle(bundle_dir, recipe, current_lock(recipe)) if recipe \
        else read_bundle(bundle_dir)
    site = load_site(site_name, project)
    sqsh = existing_artifact(sqsh_path.resolve(), "sqsh")
    stem = sqsh.path.name.rsplit(".", 1)[0]
    tuning = runtime_tuning(bundle_dir, bundle, mount_point or DEFAULT_MOUNT_POINT)
    artifact = write_edf_beside(
        sqsh, name or f"{stem}-tuning", site, rocm_version=rocm_version or (recipe.rocm if recipe
                                                                   else None),
        workdir=edf_workdir(sqsh.path.with_name(f"{stem}.toml")), tuning=tuning,
        regenerate=f"imagebuild tune edf {bundle_dir} {target} --site {site_name}",
        network=plan_for(recipe, None, project).image_network if recipe else None)
    return artifact, bundle
