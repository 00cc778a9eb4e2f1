"""`imagebuild promote tested|stable`: promotion by proof, in the registry only.

``tested IMAGE --report R``: after a passed validation of the image by digest, tag that
digest ``<canonical-tag>-tested-<report hash>``. ``stable IMAGE TAG``: set a stable tag
on the canonical tag's digest, refused without a marker on that digest and refused when
TAG already names another image (imagebuild.promote.proof).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild.promote.proof import mark_tested, promote_stable


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "promote", help="mark a validated image tested; set a stable tag only on one",
        description="Tags in the registry, set by proof: a tested marker on the digest a "
                    "passed validation ran, and stable tags only where such a marker is, "
                    "never moved. Credentials: $IMAGEBUILD_REGISTRY_USER and "
                    "$IMAGEBUILD_REGISTRY_PASSWORD, else ~/.docker/config.json.")
    steps = parser.add_subparsers(dest="step", required=True, metavar="tested|stable")
    tested = steps.add_parser(
        "tested", help="tag the validated digest <canonical-tag>-tested-<report hash>",
        description="Check that REPORT is a complete, passed `imagebuild validate` run of "
                    "IMAGE's digest, then tag that digest <canonical-tag>-tested-<the "
                    "report's sha256, 12 digits>.")
    tested.add_argument("image", help="the canonical tag: REGISTRY/imagebuild/RECIPE:<hash>")
    tested.add_argument("--report", type=Path, required=True,
                        help="the validation report (validate --report FILE) of "
                             "REGISTRY/imagebuild/RECIPE@sha256:...")
    tested.add_argument("--allow-cpu", action="store_true",
                        help="accept a CPU-mode run (a project that validates without GPUs)")
    tested.set_defaults(func=run_tested)
    stable = steps.add_parser(
        "stable", help="set a stable tag on a tested image; never move one",
        description="Set TAG on the digest IMAGE's canonical tag names, if a tested marker "
                    "of it names the same digest. A TAG that names another image is never "
                    "moved: that is refused.")
    stable.add_argument("image", help="the canonical tag: REGISTRY/imagebuild/RECIPE:<hash>")
    stable.add_argument("tag", help="the stable tag to set, e.g. 2025.06")
    stable.add_argument("--report", type=Path, default=None,
                        help="require the marker of this report (default: any marker of "
                             "the canonical tag on its digest)")
    stable.set_defaults(func=run_stable)


def run_tested(args: argparse.Namespace) -> int:
    done = mark_tested(args.image, args.report, allow_cpu=args.allow_cpu)
    print(f"{'marked' if done.changed else 'already marked'} {done.ref} -> {done.digest}")
    return 0


def run_stable(args: argparse.Namespace) -> int:
    done = promote_stable(args.image, args.tag, report=args.report)
    print(f"{'promoted' if done.changed else 'already promoted'} {done.ref} -> {done.digest} "
          f"(proof: {done.marker})")
    return 0
