"""`imagebuild build`: lock check -> render -> build -> squash (-> push), skipping what is done.

Each stage is the library function of its module; this one only decides what needs doing.
An image is tagged with the hash of its build inputs (the rendered Dockerfile and every
staged context file), so a second build with nothing changed finds its image and returns
without touching the engine's builder; squash artifacts record the image id they came from
and are likewise reused (imagebuild.build.image).
"""

from __future__ import annotations

import difflib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from imagebuild.convert.artifacts import Artifact
from imagebuild.engine.base import Engine
from imagebuild.engine.progress import BuildEvent
from imagebuild.engine.select import open_engine
from imagebuild.engine.stage_table import StageTable
from imagebuild.errors import ImagebuildError
from imagebuild.generated import write_all
from imagebuild.images import build_tag, image_repository, latest_tag
from imagebuild.recipe.load import project_dir
from imagebuild.recipe.model import short_hash
from imagebuild.recipe.site import default_site
from imagebuild.render.dockerfile import generated_dockerfile
from imagebuild.render.edf import DEFAULT_SITE, generated_edf

from .image import (
    BuildOptions,
    BuiltImage,
    ImageJob,
    build_and_squash,
    build_or_reuse,
    context_hash,
)
from .prepare import PreparedBuild
from .stage_plan import parse_stages

Say = Callable[[str], None]


def build_recipe(prepared: PreparedBuild, options: BuildOptions, *, engine: Engine | None = None,
                 say: Say = lambda _: None,
                 progress: Callable[[BuildEvent], None] | None = None) -> BuiltImage:
    """The recipe's image and its artifacts; the committed Dockerfile and EDF are brought up
    to date first (``build`` renders)."""
    started = time.monotonic()
    recipe = prepared.recipe
    for item in write_all([generated_dockerfile(prepared.plan, text=prepared.dockerfile),
                           generated_edf(recipe, project_dir(), default_site(DEFAULT_SITE),
                                         prepared.plan.image_network)]):
        say(f"rendered {item.path}")
    engine = engine or open_engine(options.backend, builder=options.builder)
    prepare_seconds = time.monotonic() - started
    with prepared.staged_context() as context:
        build_hash = context_hash(context)
        job = ImageJob(recipe.name, context, (build_tag(recipe, build_hash),
                                              latest_tag(recipe.name)), build_hash,
                       log_path=options.output_dir / recipe.name / "build.log")
        result = build_and_squash(prepared, job, options, engine=engine, say=say,
                                  progress=progress)
    return replace(result, seconds={"prepare": prepare_seconds, **result.seconds})


def format_sizes(artifacts: Sequence[Artifact]) -> list[str]:
    return [f"{a.kind:5} {a.path}  {a.size / (1 << 20):.1f} MiB  sha256:{a.sha256[:16]}  "
            f"{a.seconds:.1f} s" + (f" (read: {a.timings.read_by})" if a.timings else "")
            for a in artifacts]


def stage_names(prepared: PreparedBuild) -> list[str]:
    """The named stages of the recipe's Dockerfile, in file order."""
    return [stage.name for stage in parse_stages(prepared.dockerfile)[1]
            if not stage.name.isdigit()]


def checked_stage(prepared: PreparedBuild, stage: str) -> str:
    """``stage`` when the recipe's Dockerfile has it; else an error naming those it has."""
    names = stage_names(prepared)
    if stage not in names:
        close = difflib.get_close_matches(stage, names, n=1)
        raise ImagebuildError(
            f"--stage {stage}: the Dockerfile of {prepared.recipe.name} has no such stage",
            where=f"dockerfiles/{prepared.recipe.name}/Dockerfile",
            hint=(f"did you mean {close[0]}? " if close else "")
            + f"its stages: {', '.join(names)}")
    return stage


def stage_tag(recipe_name: str, build_hash: str, stage: str) -> str:
    """A stage image's tag: the recipe's input hash and the stage, never ``latest``."""
    return f"{image_repository(recipe_name)}:{short_hash(build_hash)}-{stage}"


def build_stage(prepared: PreparedBuild, options: BuildOptions, stage: str, *,
                engine: Engine | None = None, say: Say = lambda _: None,
                progress: Callable[[BuildEvent], None] | None = None) -> BuiltImage:
    """The recipe's Dockerfile built up to ``stage`` (BuildKit's --target) and tagged
    ``<input hash>-<stage>``: a stage on its own, e.g. the hours-long hipblaslt one on a
    large runner. The stage's layers land in the build cache the full build reuses; no
    ``latest`` tag, no squash, no push. Reused when an image with that tag and inputs
    exists."""
    started = time.monotonic()
    recipe = prepared.recipe
    checked_stage(prepared, stage)
    for item in write_all([generated_dockerfile(prepared.plan, text=prepared.dockerfile)]):
        say(f"rendered {item.path}")
    engine = engine or open_engine(options.backend, builder=options.builder)
    with prepared.staged_context(stage) as context:
        build_hash = context_hash(context)
        job = ImageJob(recipe.name, context, (stage_tag(recipe.name, build_hash, stage),),
                       build_hash, log_path=options.output_dir / recipe.name
                       / f"build-{stage}.log", target=stage)
        table = StageTable(progress)
        image, built = build_or_reuse(prepared, job, options, engine=engine, say=say,
                                      progress=table)
    return BuiltImage(image=image, built=built,
                      seconds={"build": time.monotonic() - started} if built else {},
                      stages=table if built else None,
                      provenance_note=(engine.attestation_problem() or "") if built else "")
