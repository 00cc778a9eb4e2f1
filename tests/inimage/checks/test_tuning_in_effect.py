"""The ``tuning`` validation check and ``imagebuild validate --tuning`` on CPU, for real:
the runner and its measuring children are real processes with real torch; only the GPU
comparison itself cannot run here, and the check says so."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from imagebuild.inimage.checks import tuning_in_effect
from imagebuild.inimage.tuning.bundle_format import (
    TUNING_VARIABLES,
    Bundle,
    BundleProblem,
    read_bundle,
    tuning_env,
    write_bundle,
)
from imagebuild.inimage.tuning.trace import problems_from_trace
from tests.support.validate import assert_valid_report, check, run_imagebuild

PROBLEMS = (BundleProblem(64, 48, 32, 1, "T", "N", "f32_r"),
            BundleProblem(32, 48, 64, 2, "N", "T", "bf16_r"),
            BundleProblem(40, 24, 56, 1, "N", "N", "bf16_r"))


def cpu_bundle(directory: Path, **changes) -> Bundle:
    """A bundle that matches this torch, as `imagebuild tune gemm` writes it on a GPU."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tunableop_results0.csv").write_text(
        f"Validator,PT_VERSION,{torch.__version__}\n")
    bundle = replace(Bundle(image_digest="", recipe="", hipblaslt_git_version=None,
                            torch_version=torch.__version__, gpu_arch="gfx942:sramecc+:xnack-",
                            cu_count=228, files={"tunableop": "tunableop_results.csv"},
                            problems=PROBLEMS), **changes)
    write_bundle(directory, bundle)
    return bundle


def test_operands_are_the_problem_they_measure(tmp_path):
    """The children build each problem's operands from its column-major terms; profiled
    and read back by the trace reader, they give the same problem (transposes included)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for p in PROBLEMS:
            spec = {"m": p.m, "n": p.n, "k": p.k, "batch_count": p.batch_count,
                    "transA": p.transA, "transB": p.transB, "a_type": p.a_type}
            mat1, mat2, out = tuning_in_effect._operands(spec, torch.device("cpu"))
            (torch.mm if mat1.dim() == 2 else torch.bmm)(mat1, mat2, out=out)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    stats, summary = problems_from_trace(path)
    if summary["with_strides"] == 0:
        pytest.skip(f"torch {torch.__version__} records no Input Strides")
    found = {(s.problem.m, s.problem.n, s.problem.k, s.problem.batch_count,
              s.problem.trans_a, s.problem.trans_b, s.problem.a_type) for s in stats}
    assert found == {(p.m, p.n, p.k, p.batch_count, p.transA, p.transB, p.a_type)
                     for p in PROBLEMS}


def test_children_run_without_then_with_the_bundle(tmp_path, monkeypatch):
    """Two real child processes: the first sees no tuning variable (even when this process
    has them, as under `validate --tuning`), the second exactly the bundle's."""
    directory = (tmp_path / "bundle").resolve()
    bundle = cpu_bundle(directory)
    monkeypatch.setenv("PYTORCH_TUNABLEOP_ENABLED", "1")
    monkeypatch.setenv("HIPBLASLT_TUNING_OVERRIDE_FILE", "/elsewhere/override.txt")
    rows, extra, reasons, _ = tuning_in_effect.compare(directory, read_bundle(directory), "cpu",
                                             tmp_path)
    assert extra["env_without"] == {}
    assert extra["env_with"] == tuning_env(bundle, str(directory))
    assert set(extra["env_with"]) <= set(TUNING_VARIABLES)
    assert [(r.problem.m, r.problem.n, r.problem.k, r.problem.batch_count) for r in rows] == \
        [(p.m, p.n, p.k, p.batch_count) for p in PROBLEMS]
    assert all(r.before.us > 0 and r.after.us > 0 for r in rows)
    assert all(r.kernel_changed is None for r in rows)  # no device kernels on CPU
    # CPU torch has no TunableOp: the bundle's results could not have been loaded.
    assert reasons == [f"TunableOp loaded no result from {directory}/tunableop_results.csv"]


def test_on_cpu_it_matches_and_skips_with_the_reason(tmp_path):
    directory = tmp_path / "bundle"
    cpu_bundle(directory, recipe="cpu-demo")
    status, reason, figures = tuning_in_effect.evaluate(directory, {"recipe": "cpu-demo"}, None, tmp_path)
    assert status == "skipped"
    assert reason.startswith("GPU-only: GEMMs without and with the bundle (3 problems)")
    assert "recipe cpu-demo" in reason and f"torch_version {torch.__version__}" in reason
    assert figures["matched_against"] == {"recipe": "cpu-demo",
                                          "torch_version": torch.__version__}


@pytest.mark.parametrize(("change", "manifest", "field"), [
    ({"recipe": "rocm-7.0.2"}, {"recipe": "cpu-demo"},
     "recipe: bundle has 'rocm-7.0.2', target has 'cpu-demo'"),
    ({"torch_version": "2.8.0+rocm7.0.2"}, None, "torch_version: bundle has '2.8.0+rocm7.0.2'"),
    ({"hipblaslt_git_version": "0123abcde"},
     {"hipblaslt": {"enabled": True, "commit": "c7a3b1f2d" + "0" * 31}},
     "hipblaslt_git_version: bundle has '0123abcde'"),
])
def test_a_bundle_of_another_build_fails_naming_the_field(tmp_path, change, manifest, field):
    directory = tmp_path / "bundle"
    cpu_bundle(directory, **change)
    status, reason, figures = tuning_in_effect.evaluate(directory, manifest, None, tmp_path)
    assert status == "failed"
    assert reason.startswith("the bundle does not match: ") and field in reason
    assert any(line.startswith(field) for line in figures["mismatches"])


def test_an_abbreviated_library_revision_matches_the_locked_commit(tmp_path):
    directory = tmp_path / "bundle"
    cpu_bundle(directory, hipblaslt_git_version="c7a3b1f2d")
    manifest = {"hipblaslt": {"enabled": True, "commit": "c7a3b1f2d" + "0" * 31}}
    assert tuning_in_effect.evaluate(directory, manifest, None, tmp_path)[0] == "skipped"


def test_runner_runs_the_check_only_with_a_bundle(tmp_path):
    """The in-image runner as a real process: --tuning adds the check (and its report
    entry validates against the schema); without it the default run has no tuning check."""
    directory = tmp_path / "bundle"
    cpu_bundle(directory)
    proc = run_imagebuild("validate", "--local", "--checks", "environment,tuning",
                          "--tuning", str(directory), "--allow-cpu", "--report", "r.json",
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert_valid_report(report)
    result = check(report, "tuning")
    assert result["status"] == "skipped" and result["cause"] == "no_gpu"
    figures = result["figures"]
    # The host handed the bundle to the runner and set the variables that load it.
    assert figures["bundle"] == str(directory.resolve())
    assert figures["run_env_loads_bundle"] is True
    assert figures["run_env"] == tuning_env(read_bundle(directory), str(directory.resolve()))
    proc = run_imagebuild("validate", "--local", "--checks", "environment", "--allow-cpu",
                          "--report", "plain.json", cwd=tmp_path)
    plain = json.loads((tmp_path / "plain.json").read_text())
    assert "tuning" not in [c["name"] for c in plain["checks"]]
    from imagebuild.inimage.options import parse, selected_checks

    assert "tuning" not in selected_checks(parse([]))
    assert "tuning" in selected_checks(parse(["--tuning", "x"]))


def test_a_mismatched_bundle_fails_the_run(tmp_path):
    directory = tmp_path / "bundle"
    cpu_bundle(directory, torch_version="2.8.0+rocm7.0.2")
    proc = run_imagebuild("validate", "--local", "--checks", "tuning", "--tuning",
                          str(directory), "--allow-cpu", "--report", "r.json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = check(json.loads((tmp_path / "r.json").read_text()), "tuning")
    assert result["status"] == "failed"
    assert "torch_version: bundle has '2.8.0+rocm7.0.2'" in result["reason"]


def test_a_broken_bundle_is_refused_before_anything_runs(tmp_path):
    (tmp_path / "bundle").mkdir()
    proc = run_imagebuild("validate", "--local", "--checks", "tuning", "--tuning",
                          str(tmp_path / "bundle"), "--allow-cpu", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--tuning" in proc.stderr and "tuning.json: not found" in proc.stderr
    assert not (tmp_path / "reports").exists()


def test_verify_in_the_image_cli_skips_on_cpu_with_the_reason(tmp_path, capsys):
    from imagebuild.inimage.tuning.command import main

    directory = tmp_path / "bundle"
    cpu_bundle(directory)
    out = tmp_path / "verify.json"
    assert main(["verify", str(directory), "--json", str(out)]) == 1
    assert main(["verify", str(directory), "--allow-cpu"]) == 0
    assert "skipped: GPU-only" in capsys.readouterr().out
    assert json.loads(out.read_text())["problems"] == len(PROBLEMS)
