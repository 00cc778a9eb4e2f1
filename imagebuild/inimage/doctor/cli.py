"""``python -m imagebuild_checks doctor`` inside an image (or ``python -m imagebuild.inimage
doctor``): the doctor's items as this container sees them. Exit 0, or 1 when an item
failed, 2 on bad input (no manifest)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..image_manifest import load_manifest
from .before_checks import in_image_settings
from .finding import exit_code, report
from .needs import needs_beside
from .run import format_lines, run_doctor

DEFAULT_MANIFEST = "/opt/imagebuild/manifest.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="imagebuild doctor (in the image)")
    parser.add_argument("--manifest", default=os.environ.get("IMAGEBUILD_MANIFEST"),
                        help=f"image manifest (default {DEFAULT_MANIFEST} under --root)")
    parser.add_argument("--root", default="/", help="root of the tree to read (default /)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the findings as JSON ('-': stdout, instead of text)")
    args = parser.parse_args(argv)
    root = Path(args.root)
    manifest_path = args.manifest or str(root / DEFAULT_MANIFEST.lstrip("/"))
    manifest, why = load_manifest(manifest_path)
    if manifest is None:
        print(f"doctor: {why}", file=sys.stderr)
        return 2
    needs = needs_beside(manifest, manifest_path)
    findings = run_doctor(needs, in_image_settings(root, os.environ))
    document = report(findings, {"image": needs.name, "rocm": needs.rocm,
                                 "part": "image", "root": str(root)})
    if args.json == "-":
        print(json.dumps(document, indent=2))
    else:
        print(f"doctor: {needs.name} (ROCm {needs.rocm or 'none'}), in-image part, root {root}")
        print("\n".join(format_lines(findings)))
        if args.json:
            partial = Path(args.json + ".partial")
            partial.write_text(json.dumps(document, indent=2) + "\n")
            partial.replace(args.json)
    return exit_code(findings)
