"""The RCCL sweep's driver (imagebuild/inimage/tuning/rccl_sweep.py): the sizes it covers,
the variables each run gets, what it keeps and what it names as unavailable. The
benchmarks are stand-ins (tests/support/rccl_tests_standin.py): the GPU run itself is not
possible here; tests/components/rccl_tuner/test_rccl_tuner.py carries the sweep's result through the real
tuner plugin."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from imagebuild.inimage.tuning.command import main as image_tune
from imagebuild.inimage.tuning.problems import ProblemError
from imagebuild.inimage.tuning.rccl_sweep import (
    run_sweep,
    size_ranges,
    sweep_env,
    visible_gpus,
)
from tests.support.rccl_tests_standin import write_standins

COLLECTIVES = ("collective,bytes,calls,algorithm,protocol,model_time_us,nranks,hosts\n"
               "allreduce,4096,3,,,,8,1\n"
               "allreduce,302006272,1,,,,8,1\n"
               "reducescatter,4202708992,1,,,,8,1\n"
               ",512,2,tree,ll,,,1\n"
               "sendrecv,65536,4,,,,8,1\n")


def _collectives(tmp_path: Path, text: str = COLLECTIVES) -> Path:
    path = tmp_path / "collectives.csv"
    path.write_text(text)
    return path


def test_the_ranges_cover_every_named_size_by_powers_of_two(tmp_path: Path) -> None:
    assert size_ranges(_collectives(tmp_path)) == {
        "allreduce": (4096, 1 << 29),            # 302006272 < 2^29
        "reducescatter": (1 << 31, 1 << 32)}     # 2^31 <= 4202708992 < 2^32


def test_a_collectives_file_with_nothing_to_sweep_is_refused(tmp_path: Path) -> None:
    path = _collectives(tmp_path, "collective,bytes\n,512\nsendrecv,4\n")
    with pytest.raises(ProblemError, match="no collective of allreduce"):
        size_ranges(path)
    with pytest.raises(ProblemError, match=r"collectives.csv:2: bad bytes 'x'"):
        size_ranges(_collectives(tmp_path, "collective,bytes\nallreduce,x\n"))
    with pytest.raises(ProblemError, match="tune rccl LOGS"):
        size_ranges(tmp_path / "missing.csv")


def test_visible_gpus_reads_the_device_lists_first() -> None:
    assert visible_gpus({"ROCR_VISIBLE_DEVICES": "0,1,2,3"}) == 4
    assert visible_gpus({"HIP_VISIBLE_DEVICES": ""}) == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}) == 2


def test_each_run_forces_its_choice_and_drops_the_tuners_config() -> None:
    env = sweep_env({"NCCL_TUNER_CONFIG_FILE": "/t.conf", "IMAGEBUILD_TUNER_RECORD": "/r",
                     "NCCL_ALGO": "Ring", "PATH": "/bin"}, "tree", "ll128")
    assert env == {"PATH": "/bin", "NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}


def test_the_sweep_measures_every_available_combination(tmp_path: Path) -> None:
    bench = write_standins(tmp_path / "bin")
    lines: list[str] = []
    rows = run_sweep(size_ranges(_collectives(tmp_path)), 8, bench, report=lines.append,
                     environ={"NCCL_TUNER_CONFIG_FILE": "/t.conf"})
    calls = [json.loads(line) for line in (bench / "calls.jsonl").read_text().splitlines()]
    # 2 collectives x 2 algorithms x 3 protocols, each run once with its own choice
    assert len(calls) == 12
    assert {(c["binary"], c["env"]["NCCL_ALGO"], c["env"]["NCCL_PROTO"]) for c in calls} == {
        (b, a, p) for b in ("all_reduce_perf", "reduce_scatter_perf")
        for a in ("Ring", "Tree") for p in ("LL", "LL128", "Simple")}
    assert all("NCCL_TUNER_CONFIG_FILE" not in c["env"] for c in calls)
    allreduce = next(c for c in calls if c["binary"] == "all_reduce_perf")
    assert allreduce["args"][:6] == ["-b", "4096", "-e", str(1 << 29), "-f", "2"]
    assert allreduce["args"][6:8] == ["-g", "8"]
    # Tree cannot run ReduceScatter: named, and not measured
    assert [line for line in lines if "not available" in line] == [
        f"reducescatter tree/{p}: not available (exit 3: NCCL WARN Error : no algorithm/"
        "protocol available for function)" for p in ("ll", "ll128", "simple")]
    assert {(r.collective, r.algorithm) for r in rows} == {
        ("allreduce", "ring"), ("allreduce", "tree"), ("reducescatter", "ring")}
    assert len([r for r in rows if r.collective == "allreduce"]) == 6 * 18  # 2^12..2^29
    assert all(r.n_ranks == 8 for r in rows)


def test_the_image_command_writes_sweep_csv(tmp_path: Path, capsys) -> None:
    bench = write_standins(tmp_path / "bin")
    _collectives(tmp_path)
    assert image_tune(["rccl-sweep", "--out", str(tmp_path), "--gpus", "4",
                       "--rccl-tests-dir", str(bench), "--protocols", "simple",
                       "--algorithms", "ring"]) == 0
    with (tmp_path / "sweep.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["collective"], r["algorithm"], r["protocol"], r["nNodes"], r["nRanks"])
            for r in rows} == {("allreduce", "ring", "simple", "1", "4"),
                               ("reducescatter", "ring", "simple", "1", "4")}
    out = capsys.readouterr().out
    assert f"next: imagebuild tune rccl --sweep-results {tmp_path / 'sweep.csv'}" in out


def test_without_a_gpu_the_sweep_says_so_and_writes_nothing(tmp_path: Path, capsys,
                                                            monkeypatch) -> None:
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "")
    _collectives(tmp_path)
    assert image_tune(["rccl-sweep", "--out", str(tmp_path)]) == 0
    assert "rccl sweep: skipped: GPU-only" in capsys.readouterr().out
    assert not (tmp_path / "sweep.csv").exists()


def test_bad_flags_and_missing_benchmarks_are_named(tmp_path: Path, capsys) -> None:
    _collectives(tmp_path)
    assert image_tune(["rccl-sweep", "--out", str(tmp_path), "--gpus", "8",
                       "--algorithms", "ring,fast"]) == 2
    assert "--algorithms: fast: expected some of ring,tree" in capsys.readouterr().err
    assert image_tune(["rccl-sweep", "--out", str(tmp_path), "--gpus", "8",
                       "--rccl-tests-dir", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'none' / 'all_reduce_perf'}: no such benchmark" in err
    assert not (tmp_path / "sweep.csv").exists()
