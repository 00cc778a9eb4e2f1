"""`imagebuild build RECIPE`: lock check, render, build, squash (and push) in one go."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from imagebuild.build.image import BuildOptions, BuiltImage
from imagebuild.build.pipeline import build_recipe, build_stage, checked_stage, format_sizes
from imagebuild.build.prepare import PreparedBuild, prepare_build
from imagebuild.commands.engine_choice import open_engine_saying
from imagebuild.commands.list_ import format_table
from imagebuild.convert.formats import parse_formats
from imagebuild.convert.readiness import check_ready_to_squash
from imagebuild.convert.sources import add_read_argument
from imagebuild.convert.squashfs import add_compression_arguments, parse_compression
from imagebuild.engine.base import Engine
from imagebuild.engine.cache import checked_repository
from imagebuild.engine.progress import ProgressDisplay
from imagebuild.engine.select import BACKENDS
from imagebuild.errors import BuildError, EngineError
from imagebuild.recipe.load import load_recipe, project_dir
from imagebuild.recipe.site import default_site, load_site


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "build", help="lock check, render, build and squash an image",
        description="Build the image of a locked recipe. A no-op when the image for the "
                    "current inputs exists (and its artifacts, with --squash).")
    parser.add_argument("recipe", help="recipe name (recipes/NAME.yaml) or path")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="container engine (default: $IMAGEBUILD_BACKEND or auto: docker "
                             "with BuildKit, else podman)")
    parser.add_argument("--builder", default=None,
                        help="buildx builder to use (remote BuildKit, build farm)")
    parser.add_argument("--site-ca", type=Path, default=None,
                        help="PEM CA bundle for TLS inside the build, passed as a BuildKit "
                             "secret, never stored in a layer (default: $IMAGEBUILD_SITE_CA)")
    parser.add_argument("--squash", default=None, metavar="FORMATS",
                        help="also convert the image: sqsh, sif or sqsh,sif")
    add_compression_arguments(parser)
    add_read_argument(parser)
    parser.add_argument("--site", default=default_site(),
                        help="site profile for the EDF written beside the .sqsh "
                             "(e.g. cscs-beverin, lumi; default $IMAGEBUILD_SITE)")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="artifacts and build logs (default: PROJECT/artifacts)")
    parser.add_argument("--push", metavar="REGISTRY", default=None,
                        help="push the image to REGISTRY (host[:port][/prefix])")
    parser.add_argument("--no-cache", action="store_true",
                        help="rebuild every step even when the image is up to date")
    parser.add_argument("--cache-from", metavar="REPOSITORY", default=None,
                        help="take earlier results of each stage from this registry "
                             "repository (host[:port]/path): a runner that never built the "
                             "image rebuilds only the stages whose inputs changed")
    parser.add_argument("--cache-to", metavar="REPOSITORY", default=None,
                        help="once built, put each stage's results in this registry "
                             "repository (usually the same as --cache-from)")
    parser.add_argument("--check-reproducible", action="store_true",
                        help="then build the recipe again without cache into a second tag, "
                             "squash both and compare: exit 1, naming the first differing "
                             "files, when the two .sqsh differ")
    parser.add_argument("--json", action="store_true",
                        help="the result (image, tags, artifacts with sha256, pushes, times) "
                             "as JSON on stdout instead of the text summary")
    parser.add_argument("--plan", action="store_true",
                        help="build nothing: say which stages would rebuild against the "
                             "recipe's latest build, and why")
    parser.add_argument("--tuning", type=Path, default=None, metavar="DIR",
                        help="also build a derived image with this tuning bundle baked in "
                             "(one layer on the recipe's image, tag ...-tuned-<bundle>); "
                             "--squash and --push then apply to it")
    parser.add_argument("--stage", default=None, metavar="NAME",
                        help="build the recipe's Dockerfile up to this stage only (e.g. "
                             "hipblaslt), tagged <input hash>-NAME: no latest tag, no "
                             "squash or push; its layers are the full build's cache")
    parser.set_defaults(func=run)


#: What a stage build cannot do: it makes no runnable image of the recipe.
STAGE_REFUSES = (("squash", "--squash"), ("push", "--push"), ("tuning", "--tuning"),
                 ("check_reproducible", "--check-reproducible"), ("plan", "--plan"))


def run(args: argparse.Namespace) -> int:
    recipe = load_recipe(args.recipe)
    # Everything a build can be refused for is checked before it starts: the site profile
    # is read now, not after the build and squash it would have wasted.
    site = load_site(args.site, project_dir()) if args.site else None
    options = BuildOptions(
        backend=args.backend, builder=args.builder, site_ca=args.site_ca,
        formats=parse_formats(args.squash, "--squash") if args.squash else (),
        output_dir=(args.output_dir or project_dir() / "artifacts").resolve(),
        site=site, push=args.push, no_cache=args.no_cache,
        compression=parse_compression(args.compression, args.level, args.block_size),
        read=args.read,
        cache_from=checked_repository(args.cache_from, "--cache-from")
        if args.cache_from else None,
        cache_to=checked_repository(args.cache_to, "--cache-to") if args.cache_to else None)
    if args.tuning is not None and args.check_reproducible:
        raise BuildError("--check-reproducible: not with --tuning (check the recipe's "
                         "image, without the bundle)")
    if args.stage is not None:
        for attribute, flag in STAGE_REFUSES:
            if getattr(args, attribute):
                raise BuildError(f"--stage {args.stage}: not with {flag} (a stage is not the "
                                 "recipe's image; build the recipe without --stage for that)")
    # The lock is checked, the plan made and the Dockerfile rendered once, for every image.
    prepared = prepare_build(recipe)
    if args.stage is not None:
        return run_stage(prepared, options, checked_stage(prepared, args.stage), args.json)
    if args.plan:
        return print_plan(prepared, options)
    if options.formats:  # the squash's tools and room, before hours of building
        check_ready_to_squash(options.formats, options.output_dir, recipe.name,
                              sif_method=options.sif_method)
    if args.tuning is not None:
        return run_tuned(prepared, options, args.tuning)

    engine = open_engine_saying(options.backend, builder=options.builder)
    with ProgressDisplay(f"build {recipe.name}") as display:
        result = build_recipe(prepared, options, engine=engine, say=say, progress=display)
    if args.json:
        print(json.dumps(result_json(recipe.name, result), indent=2))
        return check_reproducible(prepared, options, result, engine) \
            if args.check_reproducible else 0
    print(f"image {result.image.ref} ({result.image.image_id[:19]}) "
          f"{'built' if result.built else 'up to date'}")
    print_build_notes(result)
    for line in format_sizes(result.artifacts):
        print(line)
    fresh = result.built or result.squashed or (result.inventory is not None
                                                and result.inventory.scanned)
    if result.inventory is not None and fresh:
        for line in result.inventory.lines():
            print(line)
    elif result.inventory is not None:  # a no-op: the table is the record's, unchanged
        sizes = result.inventory.sizes
        print(f"sizes: {sizes.total / (1 << 20):.1f} MiB in "
              f"{sum(files for _, _, files in sizes.rows)} files, as recorded in "
              f"{options.output_dir / (recipe.name + '.build.json')} (the table: --json, "
              "or the record)")
    for pushed in result.pushed:
        print(f"pushed {pushed.pinned}")
    if result.sbom_ref:
        print(f"sbom attached: {result.sbom_ref}")
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    print(f"times: {timing}")
    return check_reproducible(prepared, options, result, engine) \
        if args.check_reproducible else 0


def run_stage(prepared: PreparedBuild, options: BuildOptions, stage: str, as_json: bool) -> int:
    """``--stage NAME``: that stage alone, for a runner sized for it."""
    engine = open_engine_saying(options.backend, builder=options.builder)
    with ProgressDisplay(f"build {prepared.recipe.name} stage {stage}") as display:
        result = build_stage(prepared, options, stage, engine=engine, say=say,
                             progress=display)
    if as_json:
        print(json.dumps({**result_json(prepared.recipe.name, result), "stage": stage},
                         indent=2))
        return 0
    print(f"stage {stage} of {prepared.recipe.name}: {result.image.ref} "
          f"({result.image.image_id[:19]}) {'built' if result.built else 'up to date'}")
    print_build_notes(result)
    if result.seconds:
        print("times: " + ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items()))
    return 0


def print_plan(prepared: PreparedBuild, options: BuildOptions) -> int:
    """``--plan``: today's stage digests against the latest build's label; nothing built."""
    from imagebuild.build.image import context_hash
    from imagebuild.build.stage_plan import compare, read_label, stage_digests
    from imagebuild.images import BUILD_HASH_LABEL, latest_tag

    recipe = prepared.recipe
    latest = latest_tag(recipe.name)
    with prepared.staged_context("plan") as context:
        current = stage_digests(context, prepared.epoch_build_args())
        build_hash = context_hash(context)
        labels: dict[str, str] | None = None
        try:
            engine = open_engine_saying(options.backend, for_build=False)
            if engine.image_exists(latest):
                labels = engine.image_labels(latest)
        except EngineError as exc:
            print(f"no engine to read {latest} from ({exc.text()}): every stage counts as "
                  "new")
        previous = read_label(labels) if labels is not None else None
        if labels is not None and labels.get(BUILD_HASH_LABEL) == build_hash:
            print(f"{latest} is up to date (inputs {build_hash[:19]}): nothing would build")
            return 0
        unknown = ("no earlier build of this recipe here" if labels is None else
                   f"{latest} records no stage digests (built by an older imagebuild)")
        changes = compare(context.dockerfile, current, previous, unknown)
    rows = [("STAGE", "WOULD", "WHY")] + [
        (c.stage, "rebuild" if c.rebuilds else "reuse", c.why) for c in changes]
    print(format_table(rows))
    print(f"{sum(c.rebuilds for c in changes)} of {len(changes)} stages would rebuild "
          f"against {latest if labels is not None else 'no earlier build'}; nothing was built")
    return 0


def print_build_notes(result: BuiltImage) -> None:
    """Where each stage's steps came from, and whether provenance was attached."""
    if result.stages is not None:
        print("stages (steps imported from a registry cache, cached here, built):")
        for line in result.stages.lines():
            print(f"  {line}")
    if result.built:
        print("provenance: " + (f"not attached: {result.provenance_note}"
                                if result.provenance_note else
                                "SLSA provenance attestation attached (mode=max)"))


def result_json(recipe: str, result: BuiltImage) -> dict:
    return {"recipe": recipe, "image": result.image.ref, "image_id": result.image.image_id,
            "tags": list(result.image.tags), "built": result.built,
            "artifacts": [{"kind": a.kind, "path": str(a.path), "size": a.size,
                           "sha256": a.sha256} for a in result.artifacts],
            "pushed": [p.pinned for p in result.pushed],
            "pushed_tags": [{"ref": p.ref, "digest": p.digest} for p in result.pushed],
            "sbom": result.sbom_ref,
            "stages": result.stages.as_json() if result.stages is not None else None,
            "provenance": None if not result.built else (
                result.provenance_note or "attached"),
            "seconds": {k: round(v, 2) for k, v in result.seconds.items()}}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def check_reproducible(prepared: PreparedBuild, options: BuildOptions, result: BuiltImage,
                       engine: Engine) -> int:
    """``--check-reproducible``: 0 when a clean rebuild squashes to the same bytes."""
    from imagebuild.build.recheck import check_reproducible as recheck
    from imagebuild.convert.reproducible import report_lines

    with ProgressDisplay(f"rebuild {prepared.recipe.name} without cache") as display:
        check = recheck(prepared, options, result, engine=engine, say=say, progress=display)
    for comparison in (check.comparison, check.sif):
        for line in report_lines(comparison) if comparison else ():
            print(line)
    if not check.reproducible:
        print(f"kept for inspection: {check.second.ref}, {check.directory}")
    print("check times: " + ", ".join(f"{k} {v:.1f} s" for k, v in check.seconds.items()))
    return 0 if check.reproducible else 1


def run_tuned(prepared: PreparedBuild, options: BuildOptions, bundle_dir: Path) -> int:
    """The recipe's image (never squashed or pushed here), then the derived image with the
    bundle, which gets the artifacts and the push."""
    from imagebuild.tune.derive import build_derived, checked_bundle

    recipe = prepared.recipe
    # A bundle of another recipe or build is refused before anything is built.
    checked_bundle(bundle_dir, recipe, prepared.lock)
    engine = open_engine_saying(options.backend, builder=options.builder)
    with ProgressDisplay(f"build {recipe.name}") as display:
        base = build_recipe(prepared, replace(options, formats=(), push=None), engine=engine,
                            say=say, progress=display)
    with ProgressDisplay(f"build {recipe.name} + tuning") as display:
        derived = build_derived(prepared, base.image, bundle_dir, options, engine=engine,
                                progress=display, say=say)
    print(f"image {base.image.ref} ({base.image.image_id[:19]}) "
          f"{'built' if base.built else 'up to date'}")
    steps = derived.steps
    print(f"tuned image {derived.image.ref} ({derived.image.image_id[:19]}) "
          + (f"built: {len(steps.cached)} steps cached, {len(steps.built)} built"
             if derived.built else "up to date")
          + f"; bundle {bundle_dir} ({', '.join(derived.bundle.files)})")
    for line in format_sizes(derived.result.artifacts):
        print(line)
    for pushed in derived.result.pushed:
        print(f"pushed {pushed.pinned}")
    return 0
