"""The fleet's screen: every node's verdict in one report, and the lists SLURM takes.

Each node screens itself (imagebuild.inimage.screen) and reports one JSON line; this
module joins them: a node the job was given that never reported FAILs ("no report"),
a node's fingerprint (kernel, driver, firmware, ROCm) that differs from the fleet's
majority is named as drift (a warning: it does not fail the node), and the outputs are
those of AMD Primus's node_smoke, which sites already use
(https://rocm.docs.amd.com/projects/primus/en/latest/02-user-guide/node-smoke-test-instruction.html):
``failing_nodes.txt`` and ``passing_nodes.txt``, one node name per line, and ``exclude``,
the failing nodes on one comma-separated line: ``srun --exclude="$(cat DIR/exclude)"``
works whatever failed (SLURM also reads a node list from a file, ``--exclude=./failing_nodes.txt``,
but stops with "Hostlist is empty!" when the file is empty); beside them ``screen.json``
and every node's own report.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from imagebuild.files import atomic_output

SCHEMA = "imagebuild-screen/1"


def drift(reports: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per fingerprint key, the nodes whose value is not the majority's (only where a
    strict majority exists: two nodes that disagree have no majority to stand out of)."""
    reports = [r for r in reports if r.get("fingerprint")]
    found = []
    keys = sorted({k for r in reports for k in r["fingerprint"]})
    for key in keys:
        values = Counter(r["fingerprint"].get(key) for r in reports)
        common, count = values.most_common(1)[0]
        if count * 2 <= len(reports):
            continue
        for report in reports:
            value = report["fingerprint"].get(key)
            if value != common:
                found.append({"node": report["node"], "key": key, "value": value,
                              "majority": common, "majority_nodes": count})
    return found


def aggregate(reports: list[dict[str, Any]], expected: list[str], why_missing: str,
              started: _dt.datetime, seconds: float, how: dict[str, Any]) -> dict[str, Any]:
    """The fleet report. ``expected``: the nodes the job was given (empty: those that
    reported); ``why_missing``: what a node without a report is told."""
    by_node = {r["node"]: r for r in reports}
    names = list(expected) + [n for n in by_node if n not in expected]
    rows = []
    for name in names:
        report = by_node.get(name)
        if report is None:
            rows.append({"node": name, "verdict": "FAIL", "reasons": [
                f"no report: {why_missing}"], "duration_s": None})
        else:
            rows.append({"node": name, "verdict": report["verdict"],
                         "reasons": report["reasons"], "duration_s": report["duration_s"]})
    durations = [r["duration_s"] for r in rows if r["duration_s"] is not None]
    failing = [r["node"] for r in rows if r["verdict"] != "PASS"]
    return {
        "schema": SCHEMA,
        "created": started.isoformat(timespec="seconds"),
        "duration_s": round(seconds, 2),
        "per_node_s": ({"min": min(durations), "median": statistics.median(durations),
                        "max": max(durations)} if durations else None),
        **how,
        "nodes": rows,
        "passing": [r["node"] for r in rows if r["verdict"] == "PASS"],
        "failing": failing,
        "exclude": ",".join(failing),
        "drift": drift(reports),
        "node_reports": {r["node"]: r for r in reports},
    }


def write(fleet: dict[str, Any], directory: Path) -> Path:
    """screen.json, failing_nodes.txt, passing_nodes.txt, exclude and nodes/<node>.json."""
    directory.mkdir(parents=True, exist_ok=True)
    nodes = directory / "nodes"
    nodes.mkdir(exist_ok=True)
    for name, report in fleet["node_reports"].items():
        with atomic_output(nodes / f"{name}.json") as partial:
            partial.write_text(json.dumps(report, indent=2) + "\n")
    summary = {k: v for k, v in fleet.items() if k != "node_reports"}
    for listed, key in (("failing_nodes.txt", "failing"), ("passing_nodes.txt", "passing")):
        with atomic_output(directory / listed) as partial:
            partial.write_text("".join(f"{n}\n" for n in fleet[key]))
    with atomic_output(directory / "exclude") as partial:
        partial.write_text(fleet["exclude"] + "\n")
    path = directory / "screen.json"
    with atomic_output(path) as partial:
        partial.write_text(json.dumps(summary, indent=2) + "\n")
    return path
