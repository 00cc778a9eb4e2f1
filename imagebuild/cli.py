"""Command-line entry point: argument parsing and the one error handler.

Every expected failure is an ``ImagebuildError``; it becomes one line per problem on
stderr and exit code 2. Ctrl-C exits 130 with one line. Tracebacks are reserved for bugs
(set IMAGEBUILD_DEBUG=1 to see one for an expected error too).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from imagebuild import __version__
from imagebuild.commands import COMMANDS
from imagebuild.errors import ImagebuildError, InputError, StaleFile
from imagebuild.project import chosen_project


def _chosen_command(argv: Sequence[str]) -> str | None:
    """The module of the command ``argv`` names, if any: only that one is imported (the
    others' imports cost most of a second at start: torch-free, but requests, cyclonedx,
    jinja2 and uv's resolver glue)."""
    modules = {name.rstrip("_"): name for name in COMMANDS}
    words = iter(argv)
    for word in words:
        if word in ("-C", "--project"):
            next(words, None)
        elif not word.startswith("-"):
            return modules.get(word)
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv`` naming a command, only that command's module is loaded."""
    chosen = _chosen_command(argv) if argv is not None else None
    parser = argparse.ArgumentParser(
        prog="imagebuild",
        description="Build, convert and validate ROCm PyTorch container images.",
    )
    parser.add_argument("--version", action="version", version=f"imagebuild {__version__}")
    parser.add_argument(
        "-C", "--project", metavar="DIR", default=None,
        help="project directory holding recipes/, dockerfiles/, envs/ and ci/ "
             "(default: $IMAGEBUILD_PROJECT or the current directory)",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in [chosen] if chosen else COMMANDS:
        try:
            module = importlib.import_module(f"imagebuild.commands.{name}")
        except ModuleNotFoundError as exc:  # a command not written yet in this checkout
            if exc.name == f"imagebuild.commands.{name}":
                continue
            raise
        module.register(subparsers)
    _finish_help(parser)
    return parser


def _finish_help(parser: argparse.ArgumentParser) -> None:
    """Every command's --help has a description (its one-line help when it has no more)
    and shows docstrings' ``literals`` as `literals`, not reStructuredText."""
    if parser.description:
        parser.description = parser.description.replace("``", "`")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not sub.description and (text := helps.get(name)):
                    sub.description = f"{text[0].upper()}{text[1:]}."
                _finish_help(sub)
        elif action.help:
            action.help = action.help.replace("``", "`")


def report_error(exc: ImagebuildError) -> None:
    """The one place that prints an error. Problems in files and stale files: one line
    each. Other errors: one line, then detail indented. The hint, when there is one, last
    on its own line."""
    lines = exc.text().splitlines() or [type(exc).__name__]
    if isinstance(exc, (InputError, StaleFile)):
        for line in lines:
            print(f"error: {line}", file=sys.stderr)
    else:
        print(f"error: {lines[0]}", file=sys.stderr)
        for line in lines[1:]:
            print(f"  {line}", file=sys.stderr)
    if exc.hint:
        print(f"hint: {exc.hint}", file=sys.stderr)


def _show_warnings() -> None:
    """imagebuild's own log warnings (a network retry, say) on stderr, one line each;
    other libraries' loggers stay as they are."""
    log = logging.getLogger("imagebuild")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("imagebuild: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    _show_warnings()
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if args.project is not None and not Path(args.project).is_dir():
            raise ImagebuildError(f"-C {args.project}: no such directory",
                                  hint="name the project directory that holds recipes/")
        with chosen_project(args.project) as project:
            args.project_dir = project
            return int(args.func(args) or 0)
    except ImagebuildError as exc:
        if os.environ.get("IMAGEBUILD_DEBUG"):
            raise
        report_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("imagebuild: interrupted; nothing half-written was kept", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 141


if __name__ == "__main__":
    sys.exit(main())
