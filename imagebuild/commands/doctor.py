"""``imagebuild doctor [RECIPE|IMAGE]``: does this node fit the image? Run it on a compute
node before a long job; it takes seconds and runs no GPU kernel.

Items: the amdgpu driver against the image's ROCm (AMD's tested pairs), the node's GPU
targets against the image's device code, XNACK (HSA_XNACK against amdgpu.noretry), the
host libfabric's symbol versions against the plugin's, host ROCm bound over the image's,
two SMI libraries in one process, the kernel against RCCL's cuMem need under the job's
runtime, the network plugin's release against its known-bad ranges, two tuners in one
process, and MIOpen's cache on a shared file system. What the
image needs comes from a recipe, from an image's manifest (through the container engine,
or out of a .sif or .sqsh file's squashfs), or (no target, inside an image) from
/opt/imagebuild/manifest.json; how the site launches it, from --site.
Exit codes: 0 nothing failed (warnings allowed), 1 an item failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from imagebuild.errors import RecipeNotFound, ValidateError
from imagebuild.inimage.doctor.finding import FAIL, PASS, SKIP, WARN, Finding, exit_code, report
from imagebuild.inimage.doctor.needs import ImageNeeds
from imagebuild.inimage.doctor.run import format_lines, run_doctor
from imagebuild.inimage.doctor.runtime import RUNTIMES
from imagebuild.recipe.site import default_site

COLOURS = {PASS: "green", WARN: "yellow", FAIL: "red", SKIP: "dim"}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor", help="preflight: does this node fit the image? (seconds, no GPU kernels)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", nargs="?", default=None,
                        help="recipe name or file, image reference, or .sif or .sqsh file "
                             "(default: the image this runs in, from "
                             "/opt/imagebuild/manifest.json)")
    parser.add_argument("--site", default=default_site(),
                        help="site profile: the job's environment, binds and the host "
                             "libfabric (default $IMAGEBUILD_SITE)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the findings as JSON")
    parser.add_argument("--root", default=os.environ.get("IMAGEBUILD_NODE_ROOT") or "/",
                        metavar="DIR", help="read the node's /sys and /proc under DIR (a copy "
                        "of a node's, or a test tree; default $IMAGEBUILD_NODE_ROOT, else /)")
    parser.add_argument("--libfabric-dir", default=None, metavar="DIR",
                        help="the host libfabric's directory (default: the site profile's "
                             "libfabric.library_dir, else the newest /opt/cray/libfabric)")
    parser.add_argument("--runtime", choices=RUNTIMES, default=None,
                        help="the container runtime the job uses (rccl-p2p: RCCL's P2P "
                             "failure is enroot's; default: the site profile's, from the "
                             "artifact its runtime consumes)")
    parser.add_argument("--in-image", action=argparse.BooleanOptionalAction, default=True,
                        help="for an image target: also run the in-image part in a "
                             "throwaway container (SMI libraries, mounts; default yes)")


def _is_recipe(target: str, project: Path | None) -> bool:
    from imagebuild.recipe.load import find_recipe

    try:
        find_recipe(target, project)
    except RecipeNotFound:
        if target.endswith((".yaml", ".yml")):
            raise
        return False
    return True


def image_needs(target: str | None, root: Path, project: Path | None) -> tuple[ImageNeeds, str]:
    """What the image needs, and what kind of target gave it ("recipe", "image", "file"
    for a .sif or .sqsh, "here")."""
    from imagebuild.doctor.image_needs import (
        is_image_file,
        needs_for_image,
        needs_for_image_file,
        needs_for_recipe,
        needs_from_file,
    )

    if target is None:
        manifest = root / "opt/imagebuild/manifest.json"
        if not manifest.exists():
            raise ValidateError(f"doctor: no target and no {manifest}: not inside an image "
                                "built by imagebuild", hint="name a recipe or an image: "
                                "imagebuild doctor rocm-7.2.4")
        return needs_from_file(manifest), "here"
    if is_image_file(target):
        return needs_for_image_file(Path(target)), "file"
    if _is_recipe(target, project):
        from imagebuild.recipe.load import load_recipe

        return needs_for_recipe(load_recipe(target, project)), "recipe"
    from imagebuild.commands.engine_choice import open_engine_saying

    return needs_for_image(target, open_engine_saying(for_build=False)), "image"


def in_image_findings(ref: str) -> list[Finding]:
    """The in-image part in a throwaway container of ``ref``: the SMI libraries (what the
    container's mounts show here is this engine's, not the cluster launcher's)."""
    from imagebuild.engine.select import open_engine
    from imagebuild.inimage.doctor.finding import skipped
    from imagebuild.render.layout import CHECKS_IMPORT_NAME

    result = open_engine(for_build=False).run(
        ref, ["python3", "-m", CHECKS_IMPORT_NAME, "doctor", "--json", "-"])
    try:
        document = json.loads(result.output[result.output.index("{"):])
        return [Finding(**f) for f in document["findings"] if f["item"] == "smi"]
    except (ValueError, KeyError, TypeError):
        last = (result.output.strip().splitlines() or ["no output"])[-1][-160:]
        return [skipped("smi", f"the in-image part did not run (exit {result.exit_code}: "
                               f"{last}); an image built before the doctor, or without "
                               f"python3: run `python -m imagebuild_checks doctor` inside "
                               f"it on the node")]


def doctor_findings(args: argparse.Namespace, needs: ImageNeeds, kind: str,
                    environ: dict[str, str]) -> list[Finding]:
    """Every item for ``needs`` on this node (args: --site, --root, --libfabric-dir,
    --in-image; ``bind_host_rocm`` when the caller launches with apptainer --rocm)."""
    from imagebuild.doctor.site_settings import doctor_settings, inside_image
    from imagebuild.recipe.load import project_dir
    from imagebuild.recipe.site import load_site

    site = load_site(args.site, project_dir()) if getattr(args, "site", None) else None
    runtime = getattr(args, "runtime", None)
    settings = doctor_settings(site, environ, Path(args.root),
                               bind_host_rocm=getattr(args, "bind_host_rocm", None),
                               libfabric_dir=args.libfabric_dir, runtime=runtime,
                               runtime_from=f"--runtime {runtime}", needs=needs)
    if kind == "here":  # inside the image: its loader and mount table are the ones to read
        settings = inside_image(settings)
    findings = run_doctor(needs, settings)
    if kind == "image" and args.in_image:
        inside = {f.item: f for f in in_image_findings(str(args.target))}
        findings = [inside.get(f.item, f) for f in findings]
    return findings


def print_findings(console: Any, findings: list[Finding]) -> None:
    from rich.markup import escape

    for finding, line in zip(findings, _paired(findings), strict=True):
        colour = COLOURS[finding.status]
        console.print(f"[{colour}]{escape(line[0])}[/{colour}]" + "".join(
            f"\n{escape(extra)}" for extra in line[1:]), soft_wrap=True, highlight=False)


def _paired(findings: list[Finding]) -> list[list[str]]:
    """format_lines, grouped per finding (its line, then its fix line if any)."""
    lines = iter(format_lines(findings))
    return [[next(lines)] + ([next(lines)] if f.fix else []) for f in findings]


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from imagebuild.files import atomic_output

    root = Path(args.root)
    if not root.is_dir():
        raise ValidateError(f"doctor --root {root}: not a directory",
                            hint="--root names a tree holding a node's sys/ and proc/ "
                            "(default /)")
    needs, kind = image_needs(args.target, root, getattr(args, "project_dir", None))
    findings = doctor_findings(args, needs, kind, dict(os.environ))
    console = Console()
    console.print(f"doctor: {needs.name} (ROCm {needs.rocm or 'none'}, "
                  f"{', '.join(needs.gpu_targets) or 'no GPU targets'}) on "
                  f"{os.uname().nodename if str(root) == '/' else root}"
                  + (f", site {args.site}" if args.site else ""), highlight=False,
                  soft_wrap=True)
    print_findings(console, findings)
    if args.json:
        document = report(findings, {"image": needs.name, "rocm": needs.rocm, "target": kind,
                                     "site": args.site, "root": str(root)})
        with atomic_output(Path(args.json)) as partial:
            partial.write_text(json.dumps(document, indent=2) + "\n")
        console.print(f"report: {args.json}", highlight=False)
    return exit_code(findings)
