"""``imagebuild validate --tuning DIR``: what each launcher gets (the bind and the
variables), the host's refusal of a bundle of another recipe, and the report rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagebuild.engine.docker import container_kwargs
from imagebuild.engine.podman import container_argv
from imagebuild.errors import ValidateError
from imagebuild.tune.launch import tuning_launch
from imagebuild.validate.invocation import Invocation, runs_in_container
from imagebuild.validate.launch_apptainer import apptainer_argv
from imagebuild.validate.launch_container import container_spec
from imagebuild.validate.launch_enroot import enroot_argvs
from imagebuild.validate.target import Target
from imagebuild.validate.tuning_rows import tuning_rows
from tests.inimage.checks.test_tuning_in_effect import cpu_bundle

MOUNT = "/opt/imagebuild/tuning"
IMAGE = Target("image", "imagebuild/cpu-demo:latest")


def launch_for(bundle_dir, target: Target, launcher: str):
    """As the validate command joins them: tune's launch for validate's target."""
    return tuning_launch(bundle_dir, target.recipe, runs_in_container(launcher, target))


def invocation(launch, launcher: str) -> Invocation:
    return Invocation(launcher=launcher, runner_args=("--allow-cpu", *launch.runner_args),
                      env=dict(launch.env), binds=launch.binds)


def test_container_launchers_bind_the_bundle_and_set_its_variables(tmp_path):
    cpu_bundle(tmp_path / "bundle")
    source = str((tmp_path / "bundle").resolve())
    launch = launch_for(tmp_path / "bundle", IMAGE, "docker")
    assert launch.runner_args == ("--tuning", MOUNT)
    assert dict(launch.env) == {"PYTORCH_TUNABLEOP_ENABLED": "1",
                                "PYTORCH_TUNABLEOP_TUNING": "0",
                                "PYTORCH_TUNABLEOP_FILENAME": f"{MOUNT}/tunableop_results.csv"}
    kwargs = container_kwargs(container_spec(IMAGE, invocation(launch, "docker")))
    assert kwargs["volumes"][source] == {"bind": MOUNT, "mode": "ro"}
    assert kwargs["environment"]["PYTORCH_TUNABLEOP_FILENAME"] == \
        f"{MOUNT}/tunableop_results.csv"
    assert kwargs["command"][-6:-3] == ["--allow-cpu", "--tuning", MOUNT]

    podman = container_argv(container_spec(IMAGE, invocation(launch, "podman")))
    assert podman[podman.index(f"{source}:{MOUNT}:ro") - 1] == "--volume"
    assert "PYTORCH_TUNABLEOP_TUNING=0" in podman

    apptainer = apptainer_argv(Target("sif", "/x.sif"), invocation(launch, "apptainer"),
                               binary="apptainer")
    assert apptainer[apptainer.index(f"{source}:{MOUNT}:ro") - 1] == "--bind"
    assert "PYTORCH_TUNABLEOP_ENABLED=1" in apptainer

    _, start, _ = enroot_argvs(Target("sqsh", "/x.sqsh"), invocation(launch, "enroot"), "c")
    assert start[start.index(f"{source}:{MOUNT}") - 1] == "--mount"


def test_local_runs_read_the_bundle_where_it_is(tmp_path):
    cpu_bundle(tmp_path / "bundle")
    launch = launch_for(tmp_path / "bundle", Target("environment"), "local")
    where = str((tmp_path / "bundle").resolve())
    assert launch.binds == ()
    assert launch.runner_args == ("--tuning", where)
    assert launch.env["PYTORCH_TUNABLEOP_FILENAME"] == f"{where}/tunableop_results.csv"


def test_a_bundle_of_another_recipe_is_refused_before_launching(tmp_path, monkeypatch):
    """The target names a recipe: the bundle's recipe must be it (the lock, when there is
    one, adds torch and hipBLASLt)."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "cpu-demo.yaml").write_text(
        "version: 1\nrocm: null\nbase_image: debian:bookworm\npython: '3.11'\n"
        "wheels:\n  index_url: http://127.0.0.1:9/\n  packages:\n    torch: 2.13.0\n")
    monkeypatch.setenv("IMAGEBUILD_PROJECT", str(tmp_path))
    cpu_bundle(tmp_path / "bundle", recipe="rocm-7.0.2")
    target = Target("image", "imagebuild/cpu-demo:latest", recipe="cpu-demo")
    with pytest.raises(ValidateError, match=r"recipe: bundle has 'rocm-7.0.2', target has "
                                            r"'cpu-demo'"):
        launch_for(tmp_path / "bundle", target, "docker")
    cpu_bundle(tmp_path / "good", recipe="cpu-demo")
    assert launch_for(tmp_path / "good", target, "docker").binds


def report_with(figures: dict, status: str = "passed") -> dict:
    return {"checks": [{"name": "tuning", "status": status, "reason": "r", "cause": None,
                        "figures": figures, "details": [], "duration_s": 1.0}]}


FIGURES = {"bundle": "/opt/imagebuild/tuning", "in_effect": True, "speedup_geomean": 1.0625,
           "per_problem": [{"m": 4096, "n": 8192, "k": 14336, "transA": "T", "transB": "N",
                            "before_tflops": 531.2, "after_tflops": 580.4, "speedup": 1.0926,
                            "kernel_changed": True}]}


def test_report_rows_show_each_problem():
    rows = dict(tuning_rows([report_with(FIGURES)]))
    assert rows["tuning in effect"] == ["yes"]
    assert rows["tuned GEMM speed-up (geometric mean)"] == ["1.062x"]
    assert rows["tuning m=4096 n=8192 k=14336 TN [TFLOP/s]"] == \
        ["531.2 -> 580.4 (1.09x, kernel changed)"]
    untuned = {"checks": [{"name": "gemm", "status": "skipped", "figures": {}}]}
    assert tuning_rows([untuned]) == []
    two = dict(tuning_rows([report_with(FIGURES), report_with(
        {**FIGURES, "in_effect": False, "speedup_geomean": 0.99, "per_problem": []},
        "failed")]))
    assert two["tuning in effect"] == ["yes", "NO", ""]
    assert two["tuned GEMM speed-up (geometric mean)"][-1] == "0.93x"
    assert two["tuning m=4096 n=8192 k=14336 TN [TFLOP/s]"][1] == "-"


def test_imagebuild_report_prints_them(tmp_path, capsys):
    """`imagebuild report` on a real report of a CPU run, with a GPU run's tuning figures
    put in its tuning check (a GPU run is the only way to get them)."""
    from imagebuild.cli import main
    from tests.support.validate import run_imagebuild

    cpu_bundle(tmp_path / "bundle")
    proc = run_imagebuild("validate", "--local", "--checks", "tuning", "--tuning",
                          str(tmp_path / "bundle"), "--allow-cpu", "--report", "r.json",
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    report["checks"][0]["figures"].update(FIGURES)
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert main(["report", str(tmp_path / "r.json"), "--no-plot"]) == 0
    out = capsys.readouterr().out
    assert "tuning in effect" in out and "531.2 -> 580.4 (1.09x" in out


def test_validate_refuses_a_missing_bundle_dir(tmp_path):
    with pytest.raises(ValidateError, match=r"--tuning .*nothing: .*tuning.json: not found"):
        launch_for(Path(tmp_path / "nothing"), IMAGE, "docker")
