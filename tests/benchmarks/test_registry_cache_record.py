"""docs/ci.md quotes the registry-cache rebuild times only from the committed record of
benchmarks/registry_cache.py: every build's seconds and steps, and nothing else."""

from __future__ import annotations

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RECORD = REPO / "benchmarks" / "results" / "registry-cache" / "rebuild.json"
ROWS = {"cold": "Megatron-LM at main, cold", "seed": "the same, seeding the cache",
        "same-cached": "nothing changed", "pin-cold": "Megatron-LM pinned to main's parent",
        "pin-cached": "| the same | `--cache-from`"}


def test_the_docs_table_is_the_committed_record() -> None:
    doc = (REPO / "docs" / "ci.md").read_text()
    record = json.loads(RECORD.read_text())
    assert "benchmarks/results/registry-cache/rebuild.json" in doc
    assert not record["uncommitted_changes"]
    builds = {b["build"]: b for b in record["builds"]}
    assert list(builds) == list(ROWS)
    table = [line for line in doc.splitlines() if line.startswith("| ") and " s | " in line]
    assert len(table) == len(ROWS)
    for name, row in zip(ROWS, table, strict=True):
        build = builds[name]
        assert ROWS[name] in row, row
        steps = build["steps"]
        assert f"| {build['seconds']:.1f} s | {steps['imported']}, {steps['cached']}, " \
               f"{steps['built']} |" in row, row
    # every other seconds figure in the section names one of the record's
    section = doc.split("### Measured", 1)[1].split("## Promotion", 1)[0]
    quoted = {float(x) for x in re.findall(r"(\d+\.\d) s\b", section)}
    assert quoted <= {b["seconds"] for b in builds.values()}, quoted
