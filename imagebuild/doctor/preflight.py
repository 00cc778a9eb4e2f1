"""``imagebuild validate`` runs the doctor first: a node that does not fit the image (a
failed item) stops the run before the GPU checks burn allocation, with the reasons.

Only where the checks will meet this node's AMD GPUs: not with --cpu, not on a machine
without them (the doctor's items are about AMD's driver and libraries), and not for an
sbatch script written here for other nodes (its job runs the doctor in the image on each
node before the checks: imagebuild.validate.launch_sbatch).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from imagebuild.doctor.image_needs import (
    needs_for_image,
    needs_for_image_file,
    needs_for_recipe,
    needs_from_file,
)
from imagebuild.doctor.site_settings import doctor_settings, inside_image
from imagebuild.inimage.doctor.finding import Finding
from imagebuild.inimage.doctor.needs import ImageNeeds
from imagebuild.inimage.doctor.run import run_doctor
from imagebuild.inimage.doctor.runtime import RUNTIMES
from imagebuild.recipe.site import SiteProfile

#: Where the node's /sys and /proc are read (default /): a copy of a node's, or a test's.
NODE_ROOT_ENV = "IMAGEBUILD_NODE_ROOT"


def node_root(environ: Mapping[str, str] = os.environ) -> Path:
    return Path(environ.get(NODE_ROOT_ENV) or "/")


@dataclass(frozen=True)
class Preflight:
    findings: tuple[Finding, ...]
    needs: ImageNeeds | None
    #: Why the doctor did not run, when it did not.
    skipped: str | None = None


def why_not(gpus: str, launcher: str, cpu: bool) -> str | None:
    if cpu:
        return "--cpu: no GPU checks to protect"
    if launcher == "sbatch":
        return ("the job runs on other nodes: the sbatch script runs the doctor in the image on "
                "each of them first (or `srun -N1 imagebuild doctor` there)")
    if gpus != "rocm":
        return f"no AMD GPUs here (--gpus {gpus})"
    return None


def preflight(target_kind: str, recipe: str | None, image: str | None,
              site: SiteProfile | None, environ: Mapping[str, str], *, gpus: str,
              launcher: str, cpu: bool, bind_host_rocm: bool,
              project: Path | None = None) -> Preflight:
    reason = why_not(gpus, launcher, cpu)
    if reason:
        return Preflight((), None, reason)
    root = node_root(environ)
    if recipe:
        from imagebuild.recipe.load import load_recipe

        needs = needs_for_recipe(load_recipe(recipe, project))
    elif target_kind == "image" and image:
        from imagebuild.engine.select import open_engine

        needs = needs_for_image(image, open_engine(for_build=False))
    elif target_kind == "environment":
        manifest = root / "opt/imagebuild/manifest.json"
        if not manifest.exists():
            return Preflight((), None, f"no image manifest at {manifest}")
        needs = needs_from_file(manifest)
    elif target_kind in ("sif", "sqsh") and image:
        needs = needs_for_image_file(Path(image))
    else:
        return Preflight((), None, f"cannot read what a {target_kind} target needs from here")
    # A container launcher is the runtime the checks run under (the doctor's rccl-p2p).
    named = launcher if launcher in RUNTIMES else None
    settings = doctor_settings(site, environ, root, bind_host_rocm=bind_host_rocm,
                               runtime=named, runtime_from=f"--launcher {named}", needs=needs)
    if target_kind == "environment":
        settings = inside_image(settings)
    return Preflight(tuple(run_doctor(needs, settings)), needs)
