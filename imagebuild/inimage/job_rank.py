"""Who am I in the job: rank, world size and rendezvous from torchrun or SLURM variables.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Under plain
``srun`` only SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the node list exist; the
rendezvous host is then the first host of SLURM_JOB_NODELIST, which is in Slurm's
compressed form (``nid[001-004,007]``) and is expanded here with the standard library
because ``scontrol`` is often missing inside a container.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from .gpu_data import UsageError

DEFAULT_MASTER_PORT = 29500


@dataclass(frozen=True)
class Launch:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    #: "torchrun", "slurm", "spawn" (this runner started the ranks) or "single".
    launcher: str


def detect_launch(environ: Mapping[str, str]) -> Launch | None:
    """The launch a process was started under, or None when it was started by hand."""
    if "RANK" in environ and "WORLD_SIZE" in environ:
        launcher = environ.get("IMAGEBUILD_VALIDATE_LAUNCHER", "torchrun")
        return Launch(
            rank=_int(environ, "RANK"), world_size=_int(environ, "WORLD_SIZE"),
            local_rank=_int(environ, "LOCAL_RANK", "0"),
            master_addr=environ.get("MASTER_ADDR", "127.0.0.1"),
            master_port=_int(environ, "MASTER_PORT", str(DEFAULT_MASTER_PORT)),
            launcher=launcher,
        )
    if "SLURM_PROCID" in environ and "SLURM_NTASKS" in environ:
        nodelist = (environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
                    or environ.get("SLURM_NODELIST") or "")
        if environ.get("MASTER_ADDR"):
            master = environ["MASTER_ADDR"]
        elif nodelist:
            master = expand_nodelist(nodelist)[0]
        else:
            raise UsageError("SLURM_PROCID is set but no SLURM_JOB_NODELIST or MASTER_ADDR: "
                             "cannot find the rendezvous host")
        return Launch(
            rank=_int(environ, "SLURM_PROCID"), world_size=_int(environ, "SLURM_NTASKS"),
            local_rank=_int(environ, "SLURM_LOCALID", "0"), master_addr=master,
            master_port=_int(environ, "MASTER_PORT", str(slurm_default_port(environ))),
            launcher="slurm",
        )
    return None


def slurm_default_port(environ: Mapping[str, str]) -> int:
    # Two jobs sharing a node must not pick the same port; the job id separates them.
    job = environ.get("SLURM_JOB_ID", "")
    return 20000 + int(job) % 20000 if job.isdigit() else DEFAULT_MASTER_PORT


def _int(environ: Mapping[str, str], key: str, default: str | None = None) -> int:
    value = environ.get(key, default)
    try:
        return int(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UsageError(f"environment variable {key}={value!r}: expected an integer") from None


def single_process() -> Launch:
    return Launch(0, 1, 0, "127.0.0.1", free_port(), "single")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def expand_nodelist(nodelist: str) -> list[str]:
    """Slurm's compressed host list, expanded in order.

    ``nid[001-003,007],login1`` -> nid001 nid002 nid003 nid007 login1; several bracket
    groups in one name expand as a product (``r[1-2]n[1-2]`` -> r1n1 r1n2 r2n1 r2n2);
    zero padding is kept (``[08-10]`` -> 08 09 10).
    """
    hosts: list[str] = []
    for expression in _split_top_level(nodelist.strip()):
        hosts.extend(_expand_one(expression))
    if not hosts:
        raise UsageError(f"node list {nodelist!r}: no host in it")
    return hosts


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"node list {text!r}: unbalanced ']'")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise UsageError(f"node list {text!r}: unbalanced '['")
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _expand_one(expression: str) -> list[str]:
    match = _BRACKET.search(expression)
    if not match:
        return [expression]
    head, tail = expression[: match.start()], expression[match.end():]
    names: list[str] = []
    for item in match.group(1).split(","):
        item = item.strip()
        if not item:
            raise UsageError(f"node list {expression!r}: empty range")
        if "-" in item:
            low, _, high = item.partition("-")
            if not (low.isdigit() and high.isdigit()) or int(low) > int(high):
                raise UsageError(f"node list {expression!r}: bad range {item!r}")
            width = len(low)
            names.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
        elif item.isdigit():
            names.append(item)
        else:
            raise UsageError(f"node list {expression!r}: bad range {item!r}")
    return [expanded for name in names for expanded in _expand_one(head + name + tail)]
