"""`imagebuild sites`: the site profiles this project can use (shipped and its own sites/)."""

from __future__ import annotations

import argparse
import json

from imagebuild.commands.list_ import format_table
from imagebuild.recipe.site import load_site, site_names


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sites", help="list the site profiles (--site NAME)",
        description="The site profiles --site accepts: those shipped with imagebuild and "
                    "the project's own sites/*.yaml (which win on a name clash), with their "
                    "GPU, targets, artifact formats and network.")
    parser.add_argument("--json", action="store_true",
                        help="one JSON object per profile instead of the table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    profiles = [load_site(name, args.project_dir) for name in site_names(args.project_dir)]
    if args.json:
        print(json.dumps([{"site": p.name, "description": p.description, "gpu": p.gpu,
                           "gpu_targets": list(p.gpu_targets), "formats": list(p.formats),
                           "network": {"plugin": p.network.plugin,
                                       "provider": p.network.provider},
                           "source": p.source} for p in profiles], indent=2))
        return 0
    rows = [("SITE", "GPU", "TARGETS", "FORMATS", "NETWORK", "FROM")]
    for p in profiles:
        network = p.network.plugin + (f" ({p.network.provider})" if p.network.provider else "")
        rows.append((p.name, p.gpu or "-", ",".join(p.gpu_targets) or "-",
                     ",".join(p.formats) or "-", network, p.source))
    print(format_table(rows))
    return 0
