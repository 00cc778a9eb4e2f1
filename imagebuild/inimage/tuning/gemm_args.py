"""The flags of ``imagebuild tune gemm``: one definition for the image's ``imagebuild tune
gemm`` and the host's (imagebuild/commands/tune.py), which both build their parser with
``add_gemm_arguments``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

DEFAULT_BUNDLE = "tuning/bundle"


def add_gemm_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``imagebuild tune gemm``, the same in an image and on the host."""
    parser.add_argument("problems", type=Path, nargs="?",
                        help="problems CSV from `imagebuild tune shapes` (not with --te)")
    parser.add_argument("--out", type=Path, default=Path(DEFAULT_BUNDLE),
                        help=f"bundle directory (default {DEFAULT_BUNDLE})")
    parser.add_argument("--method", choices=("auto", "tunableop", "hipblaslt"), default="auto",
                        help="auto: hipblaslt then tunableop on AMD, tunableop elsewhere")
    parser.add_argument("--bench", default=None,
                        help="hipblaslt-bench path (default: the image's, or on PATH)")
    parser.add_argument("--budget-s", type=float, default=3600.0,
                        help="time budget in seconds (default 3600)")
    parser.add_argument("--iters", type=int, default=100, help="timed iterations (default 100)")
    parser.add_argument("--cold-iters", type=int, default=20,
                        help="untimed iterations first (default 20)")
    parser.add_argument("--rotating-mb", type=int, default=None,
                        help="rotating buffer in MiB (default: twice the GPU's last-level "
                             "cache, from gpus.json; 512 where that is not known)")
    parser.add_argument("--top", type=int, default=0,
                        help="tune only the first N problems of the CSV, which `tune shapes` "
                             "sorts most time first (default 0: all)")
    parser.add_argument("--image-digest", default=os.environ.get("IMAGEBUILD_IMAGE_DIGEST", ""),
                        help="image digest to record (default $IMAGEBUILD_IMAGE_DIGEST)")
    parser.add_argument("--recipe", default=os.environ.get("IMAGEBUILD_RECIPE"),
                        help="recipe to record (default $IMAGEBUILD_RECIPE, else the image "
                             "manifest's)")
    parser.add_argument("--devices", type=int, default=8,
                        help="device ordinals to copy TunableOp's results for (default 8)")
    parser.add_argument("--allow-cpu", action="store_true",
                        help="exit 0 when there is no GPU to tune on")
    parser.add_argument("--te", metavar="CMD", default=None,
                        help="instead of a problems CSV: run CMD (one quoted command line, "
                             "one process) with TransformerEngine's online GEMM tuning and "
                             "keep the file TE saves in the bundle (TE_HIPBLASLT_ALGO_LOAD)")
    parser.add_argument("--te-run-count", type=int, default=None,
                        help="TE_HIPBLASLT_TUNING_RUN_COUNT for --te (default 20)")
    parser.add_argument("--te-algo-count", type=int, default=None,
                        help="TE_HIPBLASLT_TUNING_ALGO_COUNT for --te (default 400)")
    exact = parser.add_argument_group(
        "hipBLASLt's find_exact.py (the users' route: --find-exact)")
    exact.add_argument("--find-exact", action="store_true",
                       help="write the problems as find_exact.py configs (OUT/find_exact/"
                            "*.yaml, one per problem type) and run find_exact.py on them; "
                            "its winners become the bundle")
    exact.add_argument("--write-only", action="store_true",
                       help="--find-exact: write the configs, do not run them")
    exact.add_argument("--find-exact-script", type=Path, default=None,
                       help="find_exact.py (default: the image's, from its manifest)")
    exact.add_argument("--hipblaslt-build-dir", type=Path, default=None,
                       help="the hipBLASLt build directory find_exact.py runs against: "
                            "clients/staging/hipblaslt-bench and library/MatchTable.yaml in "
                            "it (default: the image's, from its manifest)")


def build_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="imagebuild tune gemm", description=description)
    add_gemm_arguments(parser)
    return parser
