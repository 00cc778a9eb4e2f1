"""`imagebuild clean`: what imagebuild keeps on this machine, its size, and removing it.

Three kinds: the engine's images of this project's recipes (``imagebuild/<recipe>:*``; each
recipe's ``:latest`` build is kept unless ``--all-images``: squash and validate use it), the download cache (wheels and source
archives by sha256; a lock or build downloads again what it needs) and the project's
``artifacts/`` (.sqsh, .sif, EDF files, SBOMs). Without ``--yes`` nothing is removed.
The engine's own build cache (BuildKit's, podman's layers) is the engine's to prune.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import dataclass
from pathlib import Path

from imagebuild.commands.engine_choice import open_engine_saying
from imagebuild.commands.list_ import format_table
from imagebuild.engine.base import Engine
from imagebuild.engine.select import BACKENDS
from imagebuild.errors import EngineError, ImagebuildError
from imagebuild.images import image_repository, split_reference
from imagebuild.lock.cache import default_cache_root
from imagebuild.recipe.load import recipe_names

KINDS = ("images", "cache", "artifacts")


@dataclass(frozen=True)
class Item:
    kind: str
    what: str
    size: int
    kept: str = ""  # why it stays, when it does


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "clean", help="show (and with --yes remove) imagebuild's images, caches and artifacts",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kinds", nargs="*", metavar="KIND",
                        help=f"what to consider: {', '.join(KINDS)} (default: all)")
    parser.add_argument("--yes", action="store_true", help="remove what the table lists")
    parser.add_argument("--all-images", action="store_true",
                        help="remove each recipe's latest build too")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="container engine (default: auto)")
    parser.set_defaults(func=run)


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _human(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def image_items(engine: Engine, recipes: list[str], all_images: bool) -> list[Item]:
    listed = [image for name in recipes for image in engine.list_images(image_repository(name))]
    latest = {i.image_id for i in listed if split_reference(i.ref)[1] == "latest"}
    return [Item("images", i.ref, i.size,
                 "" if all_images or i.image_id not in latest
                 else "the recipe's latest build (--all-images removes it)")
            for i in listed]


def run(args: argparse.Namespace) -> int:
    unknown = [k for k in args.kinds if k not in KINDS]
    if unknown:
        raise ImagebuildError(f"clean {unknown[0]}: expected one of {', '.join(KINDS)}")
    kinds = args.kinds or list(KINDS)
    items: list[Item] = []
    engine: Engine | None = None
    if "images" in kinds:
        try:
            engine = open_engine_saying(args.backend, for_build=False)
        except EngineError as exc:
            if args.kinds:  # asked for by name: the engine must be there
                raise
            print(f"images: not listed ({exc.text()})")
        else:
            items += image_items(engine, recipe_names(args.project_dir), args.all_images)
    for kind, path in (("cache", default_cache_root()),
                       ("artifacts", args.project_dir / "artifacts")):
        if kind in kinds and path.exists():
            items.append(Item(kind, str(path), _size(path)))
    rows = [("KIND", "WHAT", "SIZE", "")]
    rows += [(i.kind, i.what, _human(i.size), f"kept: {i.kept}" if i.kept else "")
             for i in items]
    print(format_table(rows))
    gone = [i for i in items if not i.kept]
    total = _human(sum(i.size for i in gone))
    if not args.yes:
        print(f"{len(gone)} to remove ({total}; images share layers, so they free less); "
              "nothing removed without --yes")
        return 0
    for item in gone:
        if item.kind == "images":
            assert engine is not None
            engine.remove(item.what)
        else:
            shutil.rmtree(item.what)
    print(f"removed {len(gone)} ({total})")
    return 0
