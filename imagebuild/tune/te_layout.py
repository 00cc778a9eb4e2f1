"""Which layout of TransformerEngine's algorithm file an image's TE reads, from TE's version.

ROCm/TransformerEngine's reader (``transformer_engine/common/gemm/rocm_gemm.cu``, class
GemmAlgoCache, ``header_`` and ``load_``) refuses a file whose first line is not its own
legend, so the file must be written in the layout of the TE build that loads it:

- ``2024``: ``dev_cap,m,n,k,trans_a,trans_b,type_a,type_b,type_d,bias_type,lda,ldb,ldd,epi,
  comp,scale,ws_min,ws_max,algo_id,aidx``, read since the storage was added (pull request 67,
  "Add hipBLASLt autotune results persistent storage", merged 2024-10-25) up to and including
  the release_v2.2_rocm branch (pull request 257, opened 2025-08-11);
- ``2025``: the same with ``fp8_scale`` after ``ldd`` (the GEMM's scaling mode, so that
  tensor- and block-scaled FP8 GEMMs do not share an entry), added by pull request 318 ("Add
  scaling mode to GEMM algo cache key", merged into dev 2025-09-18) and read by the release
  branches cut after it, from release_v2.4_rocm (pull request 334, 2025-10-08).

The 2.4 boundary is inferred from those dates (no 2.3 ROCm release was found). The storage
is not in the release branches cut before it merged (ifu_release_v1.9 and ifu_release_v1.11
have no TE_HIPBLASLT_ALGO_LOAD), so a TE before 1.12 is refused: it has no file to load.
``--te-layout`` names the layout where the table is wrong for a build.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from imagebuild.errors import ImagebuildError, TuneError
from imagebuild.inimage.image_manifest import load_manifest, section
from imagebuild.inimage.options import DEFAULT_MANIFEST, MANIFEST_ENV

#: The first TE release whose reader has the fp8_scale column.
FP8_SCALE_SINCE = Version("2.4")
#: The first TE release line after the storage merged (dev, 2024-10-25); the 1.9 and 1.11
#: release branches do not have it.
STORAGE_SINCE = Version("1.12")
LAYOUTS = ("2024", "2025")


@dataclass(frozen=True)
class LayoutChoice:
    layout: str
    #: where the choice came from, for the output: "TransformerEngine 2.2.0 of recipe X"
    why: str


def layout_for_version(version: str) -> str:
    """The layout TransformerEngine ``version`` (``2.2.0``, ``2.4.0+rocm7.1``) reads."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise TuneError(f"TransformerEngine version {version!r}: not a version",
                        hint="pass --te-layout 2024 or 2025") from None
    release = Version(".".join(str(p) for p in parsed.release[:2]))
    if release < STORAGE_SINCE:
        raise TuneError(f"TransformerEngine {version} predates the algorithm file "
                        "(TE_HIPBLASLT_ALGO_LOAD, ROCm/TransformerEngine pull request 67)",
                        hint="use TE's own tuning in the job, or an image with a newer TE")
    return "2025" if release >= FP8_SCALE_SINCE else "2024"


def image_te_version(manifest_path: str | None = None) -> tuple[str | None, str]:
    """(TE version, manifest path) from an image manifest: ``manifest_path``, else
    $IMAGEBUILD_MANIFEST, else /opt/imagebuild/manifest.json (inside an image)."""
    path = manifest_path or os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST
    manifest, _ = load_manifest(path)
    engine = section(manifest, "transformer_engine")
    version = engine.get("version") if engine.get("enabled", True) else None
    return (str(version) if version else None), path


def recipe_te_version(recipe: str) -> str | None:
    """The TE version the project's recipe ``recipe`` pins (None: the recipe has no TE)."""
    from imagebuild.components.transformer_engine.component import section as te_section
    from imagebuild.recipe.load import load_recipe, project_dir

    engine = te_section(load_recipe(recipe, project_dir()))
    return engine.version if engine else None


def choose_layout(layout: str | None, te_version: str | None, manifest: Path | None,
                  bundle_recipe: str) -> LayoutChoice:
    """The layout to write: ``layout`` when given; else from ``te_version``; else from the
    image manifest's TransformerEngine (``manifest``, or the image's own when this runs in
    one); else from the bundle's recipe in this project. TuneError when none says."""
    if layout:
        return LayoutChoice(layout, "as --te-layout says")
    if te_version:
        return LayoutChoice(layout_for_version(te_version),
                            f"TransformerEngine {te_version}, as --te-version says")
    found, path = image_te_version(str(manifest) if manifest else None)
    if found:
        return LayoutChoice(layout_for_version(found),
                            f"TransformerEngine {found} of the image manifest {path}")
    if manifest is not None:
        raise TuneError(f"{manifest}: no transformer_engine version in this image manifest",
                        hint="the image has no TransformerEngine; or pass --te-version")
    if bundle_recipe:
        try:
            pinned = recipe_te_version(bundle_recipe)
        except ImagebuildError as exc:
            raise TuneError(f"the bundle's recipe {bundle_recipe!r} cannot say which "
                            f"TransformerEngine the image has: {exc}",
                            hint="pass --manifest (the image's /opt/imagebuild/manifest.json) "
                                 "or --te-version") from None
        if pinned:
            return LayoutChoice(layout_for_version(pinned),
                                f"TransformerEngine {pinned} of recipe {bundle_recipe}")
        raise TuneError(f"recipe {bundle_recipe}: no transformer_engine section: the image "
                        "has no TransformerEngine to load the file",
                        hint="pass --te-version for an image with TE from elsewhere")
    raise TuneError("tune te-file: which TransformerEngine will read the file is not known "
                    "(no image manifest here, the bundle names no recipe)",
                    hint="pass --manifest MANIFEST.json, --te-version V or --te-layout "
                         "2024|2025")
