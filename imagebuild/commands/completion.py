"""`imagebuild completion bash|zsh|tcsh`: a shell completion script for every command and
option, generated from the command line's own parser by shtab (https://docs.iterative.ai/shtab/).

    imagebuild completion bash > ~/.local/share/bash-completion/completions/imagebuild
    imagebuild completion zsh > "${fpath[1]}/_imagebuild"
"""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "tcsh")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "completion", help="print a shell completion script (bash, zsh, tcsh)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shtab

    from imagebuild.cli import build_parser

    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0
