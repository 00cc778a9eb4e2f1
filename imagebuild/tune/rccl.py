"""The RCCL tuner-plugin configuration from measured collectives.

Tuner config rows (ext-tuner/example in NCCL and RCCL):
``collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks,
numPipeOps,regBuff``, lowercase names, ``-1`` = keep default / match anything; the byte
range is inclusive and the first matching row wins. Collectives from logs:
imagebuild.tune.collective_log.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from imagebuild.inimage.tuning.bundle_format import write_bundle
from imagebuild.inimage.tuning.rccl_sweep import SweepPoint, parse_rccl_tests

from .bundle import read_bundle
from .collective_log import (
    ALGORITHMS,
    PROTOCOLS,
    CollectiveRecord,
    name_of,
    parse_logs,
    write_collectives_csv,
)

__all__ = ["CollectiveRecord", "SweepPoint", "add_to_bundle", "parse_logs", "parse_rccl_tests",
           "tuner_config", "write_collectives_csv"]


def tuner_config(points: list[SweepPoint]) -> str:
    """Tuner-plugin rows choosing, per collective and topology, the fastest algorithm and
    protocol for each measured size. A row covers the sizes above the previous measured
    size up to its own; consecutive sizes with the same choice share one row. Sizes above
    the largest measured one keep RCCL's own choice."""
    best: dict[tuple[str, int, int, int], SweepPoint] = {}
    for point in points:
        name_of(point.algorithm, ALGORITHMS, "algorithm", "sweep")
        name_of(point.protocol, PROTOCOLS, "protocol", "sweep")
        key = (point.collective, point.n_nodes, point.n_ranks, point.bytes)
        if key not in best or point.busbw_gbs > best[key].busbw_gbs:
            best[key] = point
    lines = [("# collective_type,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,"
              "nRanks,numPipeOps,regBuff")]
    groups: dict[tuple[str, int, int], list[SweepPoint]] = {}
    for (coll, nodes, ranks, _), point in sorted(best.items()):
        groups.setdefault((coll, nodes, ranks), []).append(point)
    for (coll, nodes, ranks), series in groups.items():
        low = 0
        for i, point in enumerate(series):
            last = i + 1 == len(series)
            choice = (point.algorithm, point.protocol, point.channels)
            if last or (series[i + 1].algorithm, series[i + 1].protocol,
                        series[i + 1].channels) != choice:
                lines.append(f"{coll},{low},{point.bytes},{point.algorithm},{point.protocol},"
                             f"{point.channels},{nodes},{ranks},-1,-1")
                low = point.bytes + 1
    return "\n".join(lines) + "\n"


#: The tuner config's name in a tuning bundle (kind ``rccl_tuner_config``).
BUNDLE_CONFIG = "nccl_tuner.conf"


def add_to_bundle(bundle_dir: Path, config: str) -> Path:
    """Write the config into a tuning bundle and record it in tuning.json, so the bundle's
    runtime wiring (validate --tuning, tune edf, build --tuning) sets
    NCCL_TUNER_CONFIG_FILE; each file written whole, then renamed."""
    bundle = read_bundle(bundle_dir)
    path = bundle_dir / BUNDLE_CONFIG
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(config)
    tmp.replace(path)
    write_bundle(bundle_dir, replace(bundle, files=dict(bundle.files,
                                                        rccl_tuner_config=BUNDLE_CONFIG)))
    return path
