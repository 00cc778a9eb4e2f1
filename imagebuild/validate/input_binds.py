"""Host paths the checks read, made visible where they run.

``--megatron-dir`` (a Megatron-LM checkout) and ``--megatron-tokenizer-model`` (the
ReFrame check's SentencePiece model) name host paths. A check run in a container sees them
only when bound: each is resolved (a relative path means nothing in the container's working
directory), must exist (refused before anything starts), and is bound at the same path, so
the flag the runner gets stays true inside. The checkout is bound writable: Megatron compiles
its dataset helpers into it at the first start; the tokenizer is read-only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from imagebuild.errors import ValidateError
from imagebuild.recipe.site_runtime import Bind

#: (flag, argparse dest, bound read-only)
HOST_PATH_FLAGS = (("--megatron-dir", "megatron_dir", False),
                   ("--megatron-tokenizer-model", "megatron_tokenizer_model", True))


def host_path_binds(args: argparse.Namespace, in_container: bool) -> tuple[Bind, ...]:
    """Resolve the flags' paths in ``args`` (in place) and return their binds."""
    binds = []
    for flag, dest, read_only in HOST_PATH_FLAGS:
        value = getattr(args, dest, None)
        if not value:
            continue
        path = Path(value).expanduser().resolve()
        if not path.exists():
            raise ValidateError(f"{flag} {value}: no such file or directory",
                                hint="a path on this host (and, for sbatch, on the compute "
                                     "nodes' shared file system)")
        setattr(args, dest, str(path))
        if in_container:
            binds.append(Bind(str(path), str(path), read_only=read_only))
    return tuple(binds)
