"""Collectives from the tuner plugin's own record, the second source beside the logs.

With ``IMAGEBUILD_TUNER_RECORD=DIR`` in a job, the image's tuner (its v4 adapter,
imagebuild/components/rccl_tuner/v4-adapter.c) appends each distinct request RCCL makes to
``DIR/tuner-<host>-<pid>.csv``::

    collective,bytes,num_pipe_ops,reg_buff,n_ranks,n_nodes
    allreduce,302006272,1,0,8,1

``bytes`` is what the tuner is asked about and what a config's byte ranges are compared with
(NCCL's getAlgoInfo: element size x ncclFuncMaxSendRecvCount, the whole buffer for AllGather
and ReduceScatter). No log, no debug subsystem and no rank-count guess are needed.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from pathlib import Path

from imagebuild.errors import TuneError

from .collective_log import CollectiveRecord

COLUMNS = ("collective", "bytes", "num_pipe_ops", "reg_buff", "n_ranks", "n_nodes")
FILE_NAME = re.compile(r"^tuner-(?P<host>.+)-(?P<pid>\d+)\.csv$")


def record_files(paths: Iterable[Path]) -> list[Path]:
    """The record files named, or found (tuner-*.csv) in the directories named."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if FILE_NAME.match(p.name))
            if not found:
                raise TuneError(f"{path}: no tuner-<host>-<pid>.csv record in this directory",
                                hint="run the job with IMAGEBUILD_TUNER_RECORD set to this "
                                     "directory (an image with rccl_tuner enabled)")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise TuneError(f"{path}: no such file or directory")
    return files


def parse_records(paths: Iterable[Path]) -> list[CollectiveRecord]:
    """One row per (collective, bytes, communicator size): ``calls`` counts the processes
    that asked (a record lists each request once per process), ``hosts`` their hosts."""
    seen: dict[tuple[str, int, int], tuple[int, set[str]]] = {}
    for path in record_files(paths):
        match = FILE_NAME.match(path.name)
        host = match.group("host") if match else path.stem
        try:
            with path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                if tuple(reader.fieldnames or ()) != COLUMNS:
                    raise TuneError(f"{path}:1: not a tuner record (header "
                                    f"{','.join(reader.fieldnames or ())!r})",
                                    hint=f"expected {','.join(COLUMNS)}")
                rows = [(line, row) for line, row in enumerate(reader, start=2)]
        except OSError as exc:
            raise TuneError(f"{path}: cannot read: {exc.strerror}") from exc
        in_file: set[tuple[str, int, int]] = set()
        for line, row in rows:
            try:
                key = (row["collective"], int(row["bytes"]), int(row["n_ranks"]))
            except (TypeError, ValueError):
                raise TuneError(f"{path}:{line}: bad record row {row!r}",
                                hint=f"columns {','.join(COLUMNS)}") from None
            if key in in_file:
                continue  # the same size on another pipelining depth or buffer registration
            in_file.add(key)
            processes, hosts = seen.get(key, (0, set()))
            seen[key] = (processes + 1, hosts | {host})
    return [CollectiveRecord(coll, size, processes, nranks=nranks, hosts=len(hosts))
            for (coll, size, nranks), (processes, hosts) in sorted(seen.items())]
