"""`imagebuild squash TARGET`: convert a built image into site artifacts.

Writes ``<output-dir>/<name>.sqsh`` (CSCS Container Engine, enroot) and/or ``<name>.sif``
(Apptainer), each with a ``.sha256`` beside it, and with ``--site`` the EDF
``<output-dir>/<name>.toml`` pointing at the .sqsh (with its sha256 in the header; the
committed, image-independent ``envs/<recipe>.toml`` comes from ``imagebuild render``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from imagebuild import images
from imagebuild.commands.engine_choice import open_engine_saying
from imagebuild.convert.artifacts import Artifact, write_edf_beside
from imagebuild.convert.formats import FORMATS, convert, parse_formats
from imagebuild.convert.sources import add_read_argument
from imagebuild.convert.squashfs import (
    add_compression_arguments,
    find_squash_tool,
    parse_compression,
)
from imagebuild.errors import SquashError
from imagebuild.recipe.load import load_recipe, project_dir
from imagebuild.recipe.site import default_site


@dataclass(frozen=True)
class SquashTarget:
    image_ref: str
    name: str  # artifact and EDF file stem
    recipe: str | None
    rocm_version: str | None


def resolve_target(target: str, project: Path) -> SquashTarget:
    """A recipe name -> its latest build; anything else is an image reference."""
    resolved = images.resolve_target(target, project)
    if resolved.recipe is not None:
        recipe = resolved.recipe
        return SquashTarget(resolved.image, recipe.name, recipe.name, recipe.rocm)
    # enroot names an imported image the same way: ${image//[:\/]/+}
    name = re.sub(r"[:/@]", "+", target)
    return SquashTarget(target, name, None, None)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "squash", help="convert a built image to .sqsh (+ EDF) and .sif",
        description="Stream a built image into squashfs for CSCS's Container Engine/enroot "
                    "and/or a SIF for Apptainer; with --site, write the EDF NAME.toml beside them.")
    parser.add_argument("target", help="recipe name (recipes/NAME.yaml) or image reference")
    parser.add_argument("--formats", default=None,
                        help=f"comma-separated, of {', '.join(FORMATS)} "
                             "(default: the site's, else sqsh)")
    parser.add_argument("--output-dir", type=Path, default=None,
                        help="where artifacts go (default: PROJECT/artifacts)")
    add_compression_arguments(parser)
    parser.add_argument("--site", default=default_site(),
                        help="site profile for the EDF, e.g. cscs-beverin, lumi "
                             "(default: $IMAGEBUILD_SITE; none: no EDF)")
    parser.add_argument("--rocm-version", default=None,
                        help="ROCm version of the image (default: the recipe's)")
    parser.add_argument("--backend", choices=("auto", "docker", "podman"), default="auto",
                        help="container engine holding the image (default: auto)")
    add_read_argument(parser)
    parser.add_argument("--timings", action="store_true",
                        help="print where the squash's seconds went (setup, stream with the "
                             "CPU time of reading, filtering and compressing, hash+fsync)")
    parser.add_argument("--tool", choices=("tar2sqfs", "mksquashfs"), default=None,
                        help="squashfs writer (default: tar2sqfs if installed)")
    parser.add_argument("--sif-method", choices=("auto", "apptainer", "siftool"),
                        default="auto", help="how to make the .sif (default: auto)")
    parser.set_defaults(func=run)


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB"


def _print_artifact(artifact: Artifact, note: str = "") -> None:
    print(f"{artifact.kind:5} {artifact.path}  {_mib(artifact.size)}  "
          f"sha256:{artifact.sha256}  {artifact.seconds:.1f} s{note}")


def run(args: argparse.Namespace) -> int:
    project = project_dir()
    target = resolve_target(args.target, project)
    site = None
    if args.site:
        from imagebuild.recipe.site import load_site

        site = load_site(args.site, project)
    formats = parse_formats(args.formats) if args.formats else (
        site.formats if site else ("sqsh",))
    compression = parse_compression(args.compression, args.level, args.block_size)
    output_dir = (args.output_dir or project / "artifacts").resolve()
    tool = find_squash_tool(args.tool) if ("sqsh" in formats or args.sif_method != "apptainer") \
        else None
    engine = open_engine_saying(args.backend, for_build=False)
    if not engine.image_exists(target.image_ref):
        raise images.missing_image(target.image_ref, target.recipe, engine.backend,
                                   docker_passed_over=bool(engine.selection_note))
    if target.recipe:
        from imagebuild.build.current import check_current

        check_current(engine, load_recipe(target.recipe, project), target.image_ref)
    source = engine.image_source(target.image_ref, read=args.read)
    scan = None
    if target.recipe:
        # A recipe's image gets its SBOM (and size table) as `build --squash` gives it.
        from imagebuild.build.inventory import recipe_scan

        scan = recipe_scan(load_recipe(target.recipe, project), source)
    artifacts = convert(source, output_dir, target.name, formats, compression=compression,
                        tool=tool, sif_method=args.sif_method,
                        image_ref=engine.daemon_ref(target.image_ref),
                        observer=scan)
    for artifact in artifacts:
        note = f"  ({tool.name if tool else 'apptainer'}, {compression}, read: " \
               f"{source.read_by})" if artifact.kind == "sqsh" else ""
        _print_artifact(artifact, note)
        if args.timings and artifact.timings is not None:
            print(f"      {artifact.timings.line()}")
    sqsh = next((a for a in artifacts if a.kind == "sqsh"), None)
    if site is not None and sqsh is not None:
        config = source.config()
        rocm = (args.rocm_version or target.rocm_version
                or config.env_dict().get("ROCM_VERSION") or None)
        if rocm is None and target.recipe is None and site.aws_ofi_nccl_hook is not None:
            raise SquashError(f"edf: the ROCm version of {target.image_ref} is unknown "
                              f"(site {site.name} picks hooks by it); pass --rocm-version")
        network = None
        if target.recipe:
            from imagebuild.render.plan import plan_for

            network = plan_for(load_recipe(target.recipe, project), None,
                               project).image_network
        edf_file = write_edf_beside(sqsh, target.name, site, rocm_version=rocm,
                                    workdir=config.workdir or None, network=network)
        print(f"edf   {edf_file.path}  sha256:{edf_file.sha256}  (site {site.name})")
    if scan is not None:
        # no engine image id here: a later `build` re-reads the image once for its record
        from imagebuild.convert.inventory import take_inventory

        for line in take_inventory(scan, source, output_dir, target.name, "").lines():
            print(line)
    return 0
