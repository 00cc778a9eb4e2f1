"""``imagebuild validate --tuning DIR``: the bundle into the container, loaded for the run.

The host reads the bundle's ``tuning.json`` and refuses it before starting anything when it
was tuned in another recipe or build than the target's (recipe, locked torch and
hipBLASLt: tune.derive.recipe_target). A container run gets the bundle bound read-only at
/opt/imagebuild/tuning and the variables that load it (bundle_format's ``tuning_env``) for
every check, so the gemm and train checks measure the tuned image; the runner gets
``--tuning`` with the path it sees, and its ``tuning`` check compares GEMMs without and
with the bundle (imagebuild/inimage/checks/tuning_in_effect.py).

The result is plain data (runner flags, binds, environment) that the validate command
hands to imagebuild.validate like any other, so validate never imports tune.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.errors import LockError, TuneError, ValidateError
from imagebuild.inimage.tuning.bundle_format import DEFAULT_MOUNT_POINT, Bundle, tuning_env
from imagebuild.recipe.site_runtime import Bind

from .bundle import read_bundle


@dataclass(frozen=True)
class TuningLaunch:
    """What ``imagebuild validate`` adds to a run for a bundle."""

    bundle_dir: Path
    bundle: Bundle
    #: ``--tuning`` with the bundle's path as the runner sees it.
    runner_args: tuple[str, ...]
    binds: tuple[Bind, ...]
    env: Mapping[str, str]


def _recipe_check(bundle_dir: Path, recipe_name: str) -> None:
    """Refuse a bundle of another recipe or build than the target's, naming the field."""
    from imagebuild.lock.check import current_lock
    from imagebuild.recipe.load import load_recipe

    from .derive import checked_bundle

    recipe = load_recipe(recipe_name)
    try:
        lock = current_lock(recipe)
    except LockError:  # a stale lock still says nothing about the built image
        lock = None
    checked_bundle(bundle_dir, recipe, lock)


def tuning_launch(bundle_dir: Path, recipe: str | None, in_container: bool) -> TuningLaunch:
    """The runner flag, binds and environment that apply ``bundle_dir`` to a run of
    ``recipe``'s image (None: not known) whose checks run in a container or not."""
    directory = bundle_dir.resolve()
    try:
        bundle = read_bundle(directory)
        if recipe:
            _recipe_check(directory, recipe)
    except TuneError as exc:
        raise ValidateError(f"--tuning {bundle_dir}: {exc}") from None
    # sbatch with an image binds it the same way (apptainer --bind in the script; with
    # --environment, an EDF from `imagebuild tune edf` mounts it at the same place); the
    # path must then exist on the compute nodes, as for any bind.
    where = DEFAULT_MOUNT_POINT if in_container else str(directory)
    binds = (Bind(str(directory), DEFAULT_MOUNT_POINT, read_only=True),) if in_container else ()
    return TuningLaunch(directory, bundle, ("--tuning", where), binds, tuning_env(bundle, where))
