"""CLI subcommands, one module each.

Each module defines ``register(subparsers) -> None`` (adds its parser and sets
``func=run`` via ``set_defaults``) and ``run(args) -> int``. ``imagebuild.cli`` imports
the modules listed in ``COMMANDS`` and owns the one error handler.
"""

COMMANDS = [
    "list_",
    "show",
    "lock",
    "render",
    "build",
    "squash",
    "doctor",
    "screen",
    "validate",
    "report",
    "promote",
    "ci",
    "schema",
    "tune",
    "sites",
    "clean",
    "completion",
]
