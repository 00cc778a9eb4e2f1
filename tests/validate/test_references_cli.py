"""`imagebuild validate` judges a run against the references its site profile names (or
--references names), through the real CLI and the real in-image runner on CPU."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from tests.support.validate import assert_valid_report, check, run_imagebuild

REFERENCES = """\
# expected figures of the CI machine's two gloo ranks
system: ci-node
gpus:
  cpu:
    collectives.busbw_gbps_at_largest.all_reduce: [1000.0, -0.1, null, GB/s]
    collectives.busbw_gbps_at_largest.all_gather: [1.0e-6, 0.0, null, GB/s]
"""


def _project(tmp_path: Path, references: str) -> Path:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "ci-node.yaml").write_text(
        "name: ci-node\nreferences: ci-node-references.yaml\n")
    (tmp_path / "sites" / "ci-node-references.yaml").write_text(references)
    return tmp_path


def test_the_site_profiles_references_judge_the_run(tmp_path: Path) -> None:
    project = _project(tmp_path, REFERENCES)
    proc = run_imagebuild("validate", "--local", "--cpu", "--allow-cpu", "--site", "ci-node",
                          "--checks", "collectives", "--nproc", "2", "--report", "r.json",
                          cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads((project / "r.json").read_text())
    assert_valid_report(report)
    assert report["references"]["system"] == "ci-node"
    # the user's file, as the profile names it, not the JSON copy the runner read
    original = project / "sites" / "ci-node-references.yaml"
    assert report["references"]["source"] == {
        "path": str(original), "sha256": hashlib.sha256(original.read_bytes()).hexdigest()}
    assert "imagebuild-validate-inputs" not in json.dumps(report["references"])
    assert report["references"]["figures"]["collectives.busbw_gbps_at_largest.all_reduce"] == [
        1000.0, -0.1, None, "GB/s"]
    collectives = check(report, "collectives")
    assert collectives["status"] == "failed"
    assert "outside the ci-node reference 1000 GB/s (900...inf)" in collectives["reason"]
    verdicts = {e["figure"]: (e["against"], e.get("verdict"))
                for e in collectives["figures"]["judged_against"]}
    assert verdicts["collectives.busbw_gbps_at_largest.all_gather"] == ("reference", "passed")
    assert verdicts["collectives.busbw_gbps_at_largest.reduce_scatter"] == ("nothing", None)


def test_a_bad_references_file_is_an_error_naming_file_and_key(tmp_path: Path) -> None:
    project = _project(tmp_path, REFERENCES.replace("[1000.0, -0.1,", "[1000.0, 0.1,"))
    proc = run_imagebuild("validate", "--local", "--cpu", "--site", "ci-node", "--checks",
                          "collectives", "--report", "r.json", cwd=project)
    assert proc.returncode == 2
    assert ("ci-node-references.yaml: gpus.cpu.collectives.busbw_gbps_at_largest.all_reduce: "
            "lower must be null or a fraction of the value <= 0") in proc.stderr
    assert "hint:" in proc.stderr
    assert not (project / "r.json").exists()


def test_an_sbatch_job_reads_json_references_and_appends_the_history_itself(
        tmp_path: Path) -> None:
    """The job runs on compute nodes: it gets absolute paths on the shared file system."""
    (tmp_path / "refs.json").write_text(json.dumps(
        {"system": "ci-node", "gpus": {"cpu": {"train.mfu": [0.1, -0.5, None, None]}}}))
    proc = run_imagebuild("validate", "--local", "--launcher", "sbatch", "--gpus", "none",
                          "--nodes", "1", "--socket-ifname", "lo", "--allow-cpu", "--checks",
                          "collectives", "--references", "refs.json", "--history", "h.jsonl",
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [script] = tmp_path.glob("*.sbatch")
    text = script.read_text()
    assert f"--references {tmp_path / 'refs.json'}" in text
    assert f"--history {tmp_path / 'h.jsonl'}" in text
    (tmp_path / "p").mkdir()
    project = _project(tmp_path / "p", REFERENCES)
    yaml_refs = run_imagebuild("validate", "--local", "--launcher", "sbatch", "--gpus", "none",
                               "--nodes", "1", "--site", "ci-node", "--checks", "collectives",
                               cwd=project)
    assert yaml_refs.returncode == 2
    assert "the in-image runner reads JSON references" in yaml_refs.stderr
