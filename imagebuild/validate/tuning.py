"""``imagebuild validate --tuning DIR``: the bundle into the container, loaded for the run.

The host reads the bundle's ``tuning.json`` and refuses it before starting anything when it
was tuned in another recipe or build than the target's (recipe, locked torch and
hipBLASLt: tune.derive.recipe_target). A container launcher gets the bundle bound
read-only at /opt/imagebuild/tuning and the variables that load it (tune_bundle's
``tuning_env``) for every check, so the gemm and train checks measure the tuned image; the
runner gets ``--tuning`` with the path it sees, and its ``tuning`` check compares GEMMs
without and with the bundle (validate/checks/tuning.py). ``imagebuild report`` shows that
check's per-problem figures through ``tuning_rows``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagebuild.errors import LockError, ValidateError
from imagebuild.recipe.site_runtime import Bind
from imagebuild.tune.bundle import DEFAULT_MOUNT_POINT, Bundle, read_bundle
from imagebuild.tune.problem import TuneError
from imagebuild.validate.target import Target

#: Launchers whose checks run in a container (the bundle is bound in).
CONTAINER_LAUNCHERS = ("docker", "podman", "apptainer", "enroot")


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
    from imagebuild.tune.derive import checked_bundle

    recipe = load_recipe(recipe_name)
    try:
        lock = current_lock(recipe)
    except LockError:  # a stale lock still says nothing about the built image
        lock = None
    checked_bundle(bundle_dir, recipe, lock)


def tuning_launch(bundle_dir: Path, target: Target, launcher: str) -> TuningLaunch:
    """The runner flag, binds and environment that apply ``bundle_dir`` to this run."""
    from imagebuild.tune.bundle import tuning_env

    directory = bundle_dir.resolve()
    try:
        bundle = read_bundle(directory)
        if target.recipe:
            _recipe_check(directory, target.recipe)
    except TuneError as exc:
        raise ValidateError(f"--tuning {bundle_dir}: {exc}") from None
    # sbatch with an image binds it the same way (apptainer --bind in the script; with
    # --environment, an EDF from `imagebuild tune edf` mounts it at the same place); the
    # path must then exist on the compute nodes, as for any bind.
    in_container = launcher in CONTAINER_LAUNCHERS or (
        launcher == "sbatch" and target.kind != "environment")
    where = DEFAULT_MOUNT_POINT if in_container else str(directory)
    binds = (Bind(str(directory), DEFAULT_MOUNT_POINT, read_only=True),) if in_container else ()
    return TuningLaunch(directory, bundle, ("--tuning", where), binds, tuning_env(bundle, where))


# --- imagebuild report ---------------------------------------------------------------------

def _tuning(report: Mapping[str, Any]) -> Mapping[str, Any]:
    for check in report.get("checks", []):
        if check.get("name") == "tuning":
            return check.get("figures") or {}
    return {}


def _problem_key(row: Mapping[str, Any]) -> str:
    return (f"m={row.get('m')} n={row.get('n')} k={row.get('k')} "
            f"{row.get('transA')}{row.get('transB')}")


def tuning_rows(reports: Sequence[Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """Rows for ``imagebuild report``: the bundle, whether it was in effect, the mean
    speed-up, then TFLOP/s without -> with it and the speed-up for each problem."""
    figures = [_tuning(r) for r in reports]
    if not any(figures):
        return []
    pad = [""] if len(reports) == 2 else []
    rows: list[tuple[str, list[str]]] = [
        ("tuning bundle", [str(f.get("bundle") or "-") for f in figures] + pad),
        ("tuning in effect", [{True: "yes", False: "NO"}.get(f.get("in_effect"), "-")
                              for f in figures] + pad)]
    means = [f.get("speedup_geomean") for f in figures]
    cells = [f"{m:.3f}x" if isinstance(m, (int, float)) else "-" for m in means]
    if len(reports) == 2:
        cells.append(f"{means[1] / means[0]:.2f}x" if all(
            isinstance(m, (int, float)) and m for m in means) else "")
    rows.append(("tuned GEMM speed-up (geometric mean)", cells))
    keys: list[str] = []
    for f in figures:
        for row in f.get("per_problem") or []:
            if _problem_key(row) not in keys:
                keys.append(_problem_key(row))
    for key in keys:
        cells = []
        for f in figures:
            row = next((r for r in f.get("per_problem") or [] if _problem_key(r) == key), None)
            cells.append("-" if row is None else
                         f"{row['before_tflops']:.1f} -> {row['after_tflops']:.1f} "
                         f"({row['speedup']:.2f}x"
                         + (", kernel changed" if row.get("kernel_changed") else "") + ")")
        rows.append((f"tuning {key} [TFLOP/s]", cells + pad))
    return rows
