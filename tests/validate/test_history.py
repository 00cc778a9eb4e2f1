"""A system's history: every run appends its figures; `imagebuild report --history` shows
them over time and flags a run outside the band of the earlier runs of its setup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagebuild.inimage.history import (
    HISTORY_SCHEMA,
    append_history,
    history_record,
    read_history,
)
from imagebuild.inimage.test_hooks import SLOW_RANK_ENV
from imagebuild.validate.history_view import series
from tests.support.validate import REPO, run_imagebuild
from tests.validate.test_compare import NO_MATPLOTLIB


def _record(value: float, world_size: int = 8, **extra: Any) -> dict[str, Any]:
    return {"schema": HISTORY_SCHEMA, "system": "beverin", "gpu_model": "MI300A",
            "mode": "gpu", "world_size": world_size, "nodes": 2,
            "figures": {"gemm.tflops": value}, **extra}


def test_a_run_outside_the_median_band_of_the_earlier_runs_is_flagged() -> None:
    records = [_record(500.0), _record(520.0), _record(510.0), _record(450.0), _record(560.0)]
    points = series(records, "gemm.tflops", tolerance=0.05)
    assert [p.flag for p in points] == [None, None, None, "below", "above"]
    # median 510 +- max(3 x 1.4826 x MAD 10, 5 % of 510)
    assert points[3].band == (pytest.approx(510 - 44.478), pytest.approx(510 + 44.478))
    assert points[3].earlier == 3
    # fewer than two earlier runs: shown, not judged
    assert points[0].band is None and points[1].band is None and points[1].earlier == 1


def test_one_earlier_run_does_not_judge_the_next() -> None:
    """Two runs of one image on one H200: the old band (one run's value +-5 %) flagged
    gemm.worst_shape_tflops 562.6 against 567.4..627.1."""
    points = series([_record(597.3), _record(562.6)], "gemm.tflops")
    assert points[1].flag is None and points[1].band is None


def test_a_run_flagged_below_stays_out_of_later_bands() -> None:
    """The outlier at 300 is flagged; had it joined the band (the old rule: the earlier
    runs' range), the regression to 400 after it would pass unflagged."""
    records = [_record(500.0), _record(505.0), _record(300.0), _record(400.0)]
    points = series(records, "gemm.tflops")
    assert [p.flag for p in points] == [None, None, "below", "below"]
    assert points[3].earlier == 2  # 500 and 505; not the flagged 300
    assert points[3].band == (pytest.approx(502.5 * 0.95), pytest.approx(502.5 * 1.05))


def test_a_faster_image_becomes_the_new_normal_after_a_few_runs() -> None:
    """Runs above their band join later bands: a lasting improvement stops being flagged."""
    records = [_record(v) for v in (500.0, 505.0, 600.0, 610.0, 605.0, 598.0)]
    assert [p.flag for p in series(records, "gemm.tflops")] == [
        None, None, "above", "above", None, None]


def test_a_noisy_figure_gets_a_band_as_wide_as_its_noise() -> None:
    """Spread wider than the tolerance: the band follows the scaled MAD, and a run within
    the usual scatter is not flagged."""
    values = [100.0, 112.0, 91.0, 108.0, 95.0, 104.0, 89.0]
    points = series([_record(v) for v in values], "gemm.tflops")
    assert all(p.flag is None for p in points)
    low, high = points[-1].band or (0.0, 0.0)
    assert high - low > 2 * 0.05 * 102  # wider than the 5 % floor


def test_runs_of_another_setup_do_not_make_the_band() -> None:
    records = [_record(500.0), _record(200.0, world_size=4), _record(495.0)]
    points = series(records, "gemm.tflops")
    assert points[1].earlier == 0  # the first 4-rank run starts its own band
    assert points[2].flag is None and points[2].earlier == 1


def test_train_figures_compare_only_within_one_train_configuration() -> None:
    small = {"layers": 2, "seq": 256}
    big = {"layers": 32, "seq": 8192}
    records = [{**_record(0), "figures": {"train.tokens_per_s_per_gpu": 9000.0},
                "train_configuration": small},
               {**_record(0), "figures": {"train.tokens_per_s_per_gpu": 900.0},
                "train_configuration": big}]
    assert series(records, "train.tokens_per_s_per_gpu")[1].flag is None


def test_the_history_file_is_json_lines_and_a_bad_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "h.jsonl"
    report = {"created": "t", "host": "n1", "image": "img", "versions": {"torch": "2.8"},
              "gpu_model": "MI300A", "world_size": 8, "nodes": 2, "mode": "gpu",
              "checks": [{"name": "gemm", "status": "passed",
                          "figures": {"tflops": 512.5, "fraction_of_peak": 0.52}}],
              "summary": {"exit_code": 0}}
    append_history(path, history_record(report, "beverin"))
    append_history(path, history_record(report, None))
    first, second = read_history(path)
    assert first["figures"] == {"gemm.tflops": 512.5, "gemm.fraction_of_peak": 0.52}
    assert first["system"] == "beverin" and second["system"] == "n1"
    assert first["image"] == "img" and first["versions"]["torch"] == "2.8"
    assert len(path.read_text().splitlines()) == 2
    path.write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"h.jsonl:3: not a JSON line"):
        read_history(path)


def _validate(cwd: Path, number: int, slow: str | None = None,
              references: str | None = None) -> subprocess.CompletedProcess:
    env = {SLOW_RANK_ENV: slow} if slow else {}
    extra = ["--references", references] if references else []
    proc = run_imagebuild("validate", "--local", "--cpu", "--allow-cpu", "--checks", "gemm",
                          "--cpu-gemm", "--nproc", "2", "--system", "ci-node",
                          "--history", "h.jsonl", "--report", f"r{number}.json", *extra,
                          cwd=cwd, env=env)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert "history: h.jsonl" in proc.stdout
    return proc


def test_runs_build_a_history_and_report_flags_the_slowed_rank(tmp_path: Path) -> None:
    """Three runs of two real gloo ranks; in the third, rank 1 (not rank 0, whose figures
    the report shows on top) sleeps 20 ms per GEMM call (the test hook). Its reference
    check fails naming rank 1, and its history line holds rank 1's figure, far below the
    band of the first two runs."""
    _validate(tmp_path, 1)
    first = read_history(tmp_path / "h.jsonl")[0]
    # This machine's own figure, from run 1, with room for a shared machine's noise.
    (tmp_path / "refs.json").write_text(json.dumps({"system": "ci-node", "gpus": {"cpu": {
        "gemm.tflops": [first["figures"]["gemm.tflops"], -0.6, None, "TFLOP/s"]}}}))
    _validate(tmp_path, 2, references="refs.json")
    assert json.loads((tmp_path / "r2.json").read_text())["checks"][0]["status"] == "passed"
    _validate(tmp_path, 3, slow="1:0.02", references="refs.json")
    slowed = json.loads((tmp_path / "r3.json").read_text())["checks"][0]
    assert slowed["status"] == "failed"
    assert "gemm.tflops" in slowed["reason"] and "on rank 1 (" in slowed["reason"]
    assert "outside the ci-node reference" in slowed["reason"]
    judged = {e["figure"]: e for e in slowed["figures"]["judged_against"]}
    assert judged["gemm.tflops"]["rank"] == 1 and judged["gemm.tflops"]["verdict"] == "failed"
    records = read_history(tmp_path / "h.jsonl")
    assert [r["system"] for r in records] == ["ci-node"] * 3
    assert [r["world_size"] for r in records] == [2, 2, 2]
    last = records[2]
    assert last["across_ranks"]["gemm.tflops"]["rank"] == 1
    assert last["figures"]["gemm.tflops"] == last["across_ranks"]["gemm.tflops"]["worst"]
    assert last["figures"]["gemm.tflops"] < 0.5 * last["across_ranks"]["gemm.tflops"]["median"]
    assert last["figures"]["gemm.tflops"] < 0.5 * records[1]["figures"]["gemm.tflops"]
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(NO_MATPLOTLIB)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(tmp_path / "site"), str(REPO))),
               COLUMNS="200")
    env.pop(SLOW_RANK_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "imagebuild", "report", "--history",
                           "h.jsonl", "--figure", "gemm.tflops"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the latest run regressed
    assert "3: " in proc.stdout and "ci-node cpu x2" in proc.stdout
    assert "BELOW" in proc.stdout
    assert "run 3: gemm.tflops" in proc.stdout and "is below the band" in proc.stdout
    assert "of 2 earlier run(s) of the same setup not flagged below" in proc.stdout
    assert "plot skipped" in proc.stdout and "imagebuild[report]" in proc.stdout


def test_report_history_errors_name_the_file_and_what_it_has(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(_record(500.0)) + "\n")
    proc = run_imagebuild("report", "--history", "h.jsonl", "--figure", "gemm.tflop",
                          cwd=tmp_path)
    assert proc.returncode == 2
    assert "h.jsonl: no run has the figure 'gemm.tflop'" in proc.stderr
    assert "gemm.tflops" in proc.stderr  # the hint lists what the history has
    both = run_imagebuild("report", "r.json", "--history", "h.jsonl", cwd=tmp_path)
    assert both.returncode == 2 and "not both" in both.stderr


def test_the_fingerprint_digest_names_the_loaded_bytes_not_where_they_were() -> None:
    from imagebuild.inimage.history import fingerprint_digest

    here = {"files": [{"name": "libtorch.so", "path": "/usr/lib/libtorch.so", "sha256": "aa"},
                      {"name": "librccl.so", "path": "/opt/rocm/lib/librccl.so",
                       "sha256": "bb"}]}
    moved = {"files": [{**f, "path": "/mnt" + f["path"]} for f in reversed(here["files"])]}
    other = {"files": [{**here["files"][0]}, {**here["files"][1], "sha256": "cc"}]}
    assert fingerprint_digest(here) == fingerprint_digest(moved)
    assert str(fingerprint_digest(here)).startswith("sha256:")
    assert fingerprint_digest(here) != fingerprint_digest(other)
    assert fingerprint_digest(None) is None and fingerprint_digest({"files": []}) is None


def _site(tmp_path: Path, history: str) -> None:
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "ci-node.yaml").write_text(f"name: ci-node\nhistory: {history}\n")


def test_the_site_profiles_history_records_a_run_without_the_flag(tmp_path: Path) -> None:
    _site(tmp_path, "${HISTORY_DIR}/ci-node/history.jsonl")
    proc = run_imagebuild("validate", "--local", "--cpu", "--allow-cpu", "--site", "ci-node",
                          "--checks", "gemm", "--cpu-gemm", "--nproc", "2", "--system",
                          "ci-node", "--report", "r.json", cwd=tmp_path,
                          env={"HISTORY_DIR": str(tmp_path / "shared")})
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    path = tmp_path / "shared" / "ci-node" / "history.jsonl"
    assert f"history: {path}" in proc.stdout.replace("\n", "")
    (record,) = read_history(path)
    assert record["system"] == "ci-node" and record["world_size"] == 2
    assert str(record["fingerprint"]).startswith("sha256:")  # the libraries the run loaded
    report = json.loads((tmp_path / "r.json").read_text())
    assert record["fingerprint"] != report["fingerprint"]["files"][0]["sha256"]


@pytest.mark.parametrize(("history", "message"), [
    ("history.jsonl", "history: history.jsonl: expected an absolute path"),
    ("${NOT_SET_HERE}/h.jsonl", "history: ${NOT_SET_HERE}/h.jsonl: ${NOT_SET_HERE} is not set"),
])
def test_a_site_history_that_is_not_one_file_everywhere_stops_the_run(
        tmp_path: Path, history: str, message: str) -> None:
    _site(tmp_path, history)
    proc = run_imagebuild("validate", "--local", "--cpu", "--allow-cpu", "--site", "ci-node",
                          "--checks", "gemm", "--cpu-gemm", "--report", "r.json",
                          cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ci-node.yaml: " + message in proc.stderr.replace("\n", "")
    assert "hint:" in proc.stderr
    assert not (tmp_path / "r.json").exists()
