"""docs/runtimes.md quotes the CXI stack's cost from the committed benchmark record only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "cxi_stack_build.py"
RECORD = REPO / "benchmarks" / "results" / "cxi-stack" / "build.json"


def test_the_docs_quote_the_committed_record() -> None:
    sys.path.insert(0, str(BENCH.parent))
    try:
        import cxi_stack_build
    finally:
        sys.path.remove(str(BENCH.parent))
    data = json.loads(RECORD.read_text())
    doc = " ".join((REPO / "docs" / "runtimes.md").read_text().split())
    assert cxi_stack_build.summary(data) in doc
    assert "benchmarks/results/cxi-stack/build.txt" in doc
    # The record says what it measured: the stack's steps are among those of the build.
    assert 0 < data["stage_step_seconds"]["cxi-stack"] < data["build_seconds"]
