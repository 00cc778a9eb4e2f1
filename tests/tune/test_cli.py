"""``imagebuild tune`` subcommands end to end on CPU."""

import argparse
import csv
import json
from types import SimpleNamespace

import pytest
import torch

from imagebuild.commands import COMMANDS, tune
from imagebuild.errors import TuneError
from imagebuild.inimage.tuning import gemm_tuner

from .test_bundle_apply import make_bundle
from .test_rccl import LOG


def run(argv):
    parser = argparse.ArgumentParser(prog="imagebuild")
    tune.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tune", *argv])
    return args.func(args)


def test_registered():
    assert "tune" in COMMANDS


def test_shapes_from_the_model(tmp_path, capsys):
    out = tmp_path / "problems.csv"
    assert run(["shapes", "--model", "llama-3.1-8b", "--vocab", "32000", "--fused-qkv",
                "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert len(rows) == 15
    first = rows[0]
    assert (first["m"], first["n"], first["k"], first["transA"], first["transB"]) == \
        ("14336", "8192", "4096", "T", "N")  # gate and up forward: most FLOPs
    assert "15 problems" in capsys.readouterr().out


def test_shapes_local_profiles_a_cpu_step(tmp_path, capsys):
    out = tmp_path / "problems.csv"
    assert run(["shapes", "--local", "--seq", "32", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert len(rows) == 15
    assert sum(float(r["time_share"]) for r in rows) == pytest.approx(1.0, abs=1e-4)
    assert (tmp_path / "record" / "trace.json").is_file()
    # 2 profiled blocks scaled to 32: each block's GEMMs 32 times, the output projection
    # (vocabulary 2048 of the CPU proxy) once
    counts = {(r["m"], r["n"], r["k"]): int(r["count"]) for r in rows}
    assert {c for dims, c in counts.items() if "2048" in dims} == {1}
    assert {c % 32 for dims, c in counts.items() if "2048" not in dims} == {0}
    assert "per-block GEMMs scaled to 32" in capsys.readouterr().out


def test_shapes_without_source_is_an_error(tmp_path):
    with pytest.raises(TuneError, match="no source"):
        run(["shapes", "--out", str(tmp_path / "p.csv")])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU skip path")
def test_gemm_on_cpu_skips_with_reason(tmp_path, capsys):
    problems = tmp_path / "problems.csv"
    run(["shapes", "--model", "llama-3.1-8b", "--out", str(problems)])
    out = tmp_path / "bundle"
    assert run(["gemm", str(problems), "--out", str(out)]) == 1
    assert run(["gemm", str(problems), "--out", str(out), "--allow-cpu"]) == 0
    printed = capsys.readouterr().out
    assert "skipped: GPU-only" in printed
    record = json.loads((out / gemm_tuner.RESULTS).read_text())
    assert record["methods"]["tunableop"]["skipped"].startswith("GPU-only")
    assert record["problems"] == []


def test_gemm_rejects_a_broken_problems_csv(tmp_path):
    bad = tmp_path / "p.csv"
    bad.write_text("m,n,k\n1,2,3\n")
    with pytest.raises(TuneError, match="missing column"):
        run(["gemm", str(bad), "--out", str(tmp_path / "b")])


def _gemm_options(parser: argparse.ArgumentParser) -> dict:
    return {tuple(a.option_strings) or a.dest: (a.dest, a.default, a.help, a.choices, a.nargs)
            for a in parser._actions if a.dest != "help"}


def test_gemm_flags_are_the_images_own(monkeypatch):
    """One definition: `imagebuild tune gemm` on the host has the image's flags, defaults and
    help (the README's `--out DIR` form included)."""
    monkeypatch.delenv("IMAGEBUILD_RECIPE", raising=False)
    parser = argparse.ArgumentParser(prog="imagebuild")
    tune.register(parser.add_subparsers(dest="command"))
    host = parser._subparsers._group_actions[0].choices["tune"]
    host_gemm = host._subparsers._group_actions[0].choices["gemm"]
    image = gemm_tuner.build_parser()
    assert _gemm_options(host_gemm) == _gemm_options(image)
    from imagebuild.inimage.tuning.command import build_parser

    image_cli = build_parser()._subparsers._group_actions[0].choices["gemm"]
    assert _gemm_options(image_cli) == _gemm_options(image)
    args = host_gemm.parse_args(["tuning/problems.csv", "--out", "tuning/bundle",
                                 "--budget-s", "1800"])
    assert (str(args.out), args.budget_s, args.recipe) == ("tuning/bundle", 1800.0, None)


def test_rccl_writes_collectives_and_tuner_config(tmp_path, capsys):
    log = tmp_path / "rank0.log"
    log.write_text(LOG)
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("collective,bytes,algorithm,protocol,busbw_gbs,nNodes,nRanks\n"
                     "reducescatter,1048576,ring,simple,40.6,2,8\n"
                     "reducescatter,1048576,ring,ll,21.0,2,8\n")
    assert run(["rccl", str(log), "--sweep-results", str(sweep), "--sweep",
                "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "collectives.csv").is_file()
    conf = (tmp_path / "r" / "nccl_tuner.conf").read_text().splitlines()
    assert conf[1] == "reducescatter,0,1048576,ring,simple,-1,2,8,-1,-1"
    assert "rccl sweep: skipped: GPU-only" in capsys.readouterr().out


def test_verify_refuses_a_mismatched_bundle(tmp_path, capsys):
    make_bundle(tmp_path)
    with pytest.raises(TuneError, match=r"gpu_arch: bundle has 'gfx942:sramecc\+:xnack-'"):
        run(["verify", str(tmp_path), "--gpu-arch", "gfx90a:sramecc+:xnack-"])
    with pytest.raises(TuneError, match=r"torch_version"):
        run(["verify", str(tmp_path)])  # this torch is not the bundle's


def test_gemm_interrupted_keeps_what_was_tuned(tmp_path, monkeypatch, capsys):
    """Ctrl-C (or SLURM's SIGTERM at the time limit) mid-way: the problems tuned so far are
    saved and bundled, and the exit code says it was interrupted. The GPU is a seam here."""
    problems = tmp_path / "problems.csv"
    run(["shapes", "--model", "llama-3.1-8b", "--out", str(problems)])
    monkeypatch.setattr(gemm_tuner, "gpu_facts", lambda index=0: {"gpu": "stand-in",
                                                                 "vendor": "nvidia"})
    monkeypatch.setattr(gemm_tuner, "tunableop_validators", dict)
    monkeypatch.setattr(gemm_tuner, "skip_reason", lambda *a: None)

    def tune_two_then_stop(problems, out, record, *rest):
        for problem in problems[:2]:
            record["problems"].append({"m": problem["m"]})
        raise KeyboardInterrupt

    bundled = {}

    def bundle_from_run(out, *rest):
        bundled["out"] = out
        return SimpleNamespace(files={"tunableop": "x.csv"}, problems=[1, 2], recipe="r",
                               torch_version="t", gpu_arch="g")

    monkeypatch.setattr(gemm_tuner, "tune_tunableop", tune_two_then_stop)
    monkeypatch.setattr(gemm_tuner, "bundle_from_run", bundle_from_run)
    out = tmp_path / "bundle"
    assert run(["gemm", str(problems), "--out", str(out), "--method", "tunableop"]) == 130
    record = json.loads((out / gemm_tuner.RESULTS).read_text())
    assert record["stopped"] == "interrupted after 2 of 15 problems"
    assert [p["m"] for p in record["problems"]] == ["14336", "4096"]
    assert bundled["out"] == out
    assert "bundling what is done" in capsys.readouterr().err
