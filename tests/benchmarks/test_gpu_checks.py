"""benchmarks/gpu_checks.sh keeps its evidence: run here (no GPU: the GPU checks skip, which
is what this machine can show), it writes the command of each step, the host, every step's
log and exit code, the report, the references it judged by and the history, where the next
GPU run writes them for the docs to quote."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "gpu_checks.sh"
REFERENCES = json.dumps({"system": "ci-node", "gpus": {"cpu": {
    "collectives.busbw_gbps_at_largest.all_reduce": [0.000001, -0.5, None, "GB/s"]}}})


@pytest.mark.slow
def test_a_run_writes_its_evidence(tmp_path: Path) -> None:
    references = tmp_path / "refs.json"
    references.write_text(REFERENCES)
    out = tmp_path / "results"
    env = {**os.environ, "STEPS": "validate", "OUT_DIR": str(out), "PYTHON": sys.executable,
           "REFERENCES": str(references)}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    command = (out / "command.txt").read_text()
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], text=True,
                            capture_output=True, check=True).stdout.strip()
    assert f"commit {commit}" in command
    [validate] = [line for line in command.splitlines() if line.startswith("validate ")]
    assert f"--history {out}/history.jsonl" in validate
    assert f"--references {out}/references.json" in validate
    assert f"--report {out}/validate.json" in validate
    assert (out / "references.json").read_text() == REFERENCES
    steps = (out / "steps.tsv").read_text().splitlines()
    assert steps[0] == "step\texit\twall_s" and steps[1].startswith("validate\t1\t")
    report = json.loads((out / "validate.json").read_text())
    assert {c["name"] for c in report["checks"]} >= {"devices", "gemm", "train"}
    assert len((out / "history.jsonl").read_text().splitlines()) == 1
    assert "torch" in (out / "host.txt").read_text()
    assert "Traceback" not in (out / "host.txt").read_text()


def test_the_header_quotes_no_figure_without_a_committed_run() -> None:
    """Its figures come from benchmarks/results/<device>/, not from comments."""
    header = "".join(line for line in SCRIPT.read_text().splitlines(keepends=True)
                     if line.startswith("#"))
    assert not re.search(r"\d[\d,.]*\s*(TFLOP/s|tokens/s|GB/s)", header), header
