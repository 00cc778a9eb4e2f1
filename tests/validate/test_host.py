"""Host side: targets, launch command lines, the sbatch script, the event stream."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from imagebuild.commands.validate import _runner_actions
from imagebuild.engine.docker import container_kwargs
from imagebuild.engine.podman import container_argv, inherited_ulimits
from imagebuild.errors import ValidateError
from imagebuild.inimage.options import add_arguments
from imagebuild.inimage.run_report import EVENT_PREFIX
from imagebuild.validate.events import EventStream
from imagebuild.validate.host import choose_launcher, validate
from imagebuild.validate.invocation import (
    CONTAINER_INPUTS,
    Invocation,
    iter_runner_flags,
    passthrough_env,
)
from imagebuild.validate.launch_apptainer import apptainer_argv
from imagebuild.validate.launch_container import container_spec
from imagebuild.validate.launch_enroot import enroot_argvs
from imagebuild.validate.stage_checks import IMAGE_LIB, IMAGE_PACKAGE, stage
from imagebuild.validate.target import Target, detect_gpu_kind, resolve_target


def test_targets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = Path(__file__).resolve().parents[2]  # its recipes/ ship rocm-7.0.2
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.sif").touch()
    (tmp_path / "x.sqsh").touch()
    assert resolve_target(None, repo) == Target("environment")
    assert resolve_target("rocm-7.0.2", repo) == Target(
        "image", "imagebuild/rocm-7.0.2:latest", recipe="rocm-7.0.2")
    assert resolve_target("registry.example/x:1", repo) == Target("image", "registry.example/x:1")
    assert resolve_target("x.sif", tmp_path).kind == "sif"
    assert resolve_target("x.sqsh", tmp_path).kind == "sqsh"


def test_launcher_choice() -> None:
    def none(name: str) -> None:
        return None

    assert choose_launcher(Target("environment"), "auto", none) == "local"
    assert choose_launcher(Target("sif", "/x.sif"), "auto", lambda n: "/usr/bin/" + n) == "apptainer"
    with pytest.raises(ValidateError, match="apptainer"):
        choose_launcher(Target("sif", "/x.sif"), "auto", none)
    assert choose_launcher(Target("image", "x"), "podman", none) == "podman"
    on_path = lambda n: "/usr/bin/" + n
    assert choose_launcher(Target("image", "x"), "auto", none, lambda: True) == "docker"
    assert choose_launcher(Target("image", "x"), "auto", on_path, lambda: False) == "podman"
    with pytest.raises(ValidateError, match="no reachable docker engine and no podman"):
        choose_launcher(Target("image", "x"), "auto", none, lambda: False)


def test_gpu_kind_from_dev(tmp_path: Path) -> None:
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    proc.mkdir()
    assert detect_gpu_kind(dev, proc) == "none"
    (dev / "nvidiactl").touch()
    assert detect_gpu_kind(dev, proc) == "nvidia"
    (dev / "kfd").touch()
    assert detect_gpu_kind(dev, proc) == "rocm"


def _invocation(**kw: Any) -> Invocation:
    fields = {"launcher": "docker", "runner_args": ("--allow-cpu",), "gpus": "none",
              "env": {"NCCL_DEBUG": "WARN"}}
    fields.update(kw)
    return Invocation(**fields)


def test_docker_kwargs_pass_rocm_devices_with_numeric_groups(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    (dev / "dri").mkdir(parents=True)
    (dev / "kfd").touch()
    (dev / "dri" / "renderD128").touch()
    kwargs = container_kwargs(container_spec(Target("image", "img:1"), _invocation(gpus="rocm")),
                              dev)
    assert kwargs["devices"] == [f"{dev}/kfd:{dev}/kfd:rwm", f"{dev}/dri:{dev}/dri:rwm"]
    gid = (dev / "kfd").stat().st_gid
    assert kwargs["group_add"] == ([str(gid)] if gid else [])
    assert kwargs["network_mode"] == "host" and kwargs["ipc_mode"] == "host"
    assert kwargs["entrypoint"] == ["python3", "-m", IMAGE_PACKAGE]
    assert kwargs["command"] == ["--allow-cpu", "--events", "--report", "-"]
    assert kwargs["environment"]["PYTHONPATH"] == IMAGE_LIB
    assert kwargs["environment"]["NCCL_DEBUG"] == "WARN"


def test_docker_kwargs_nvidia_and_cpu(tmp_path: Path) -> None:
    nvidia = container_kwargs(container_spec(Target("image", "img"), _invocation(gpus="nvidia")),
                              tmp_path)
    request = nvidia["device_requests"][0]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    cpu = container_kwargs(container_spec(Target("image", "img"),
                                          _invocation(inputs_dir=tmp_path,
                                                      mount_checks=tmp_path / "c")), tmp_path)
    assert "devices" not in cpu and "device_requests" not in cpu
    assert cpu["volumes"] == {str(tmp_path): {"bind": CONTAINER_INPUTS, "mode": "ro"},
                              str(tmp_path / "c"): {"bind": IMAGE_LIB, "mode": "ro"}}


def test_podman_apptainer_enroot_command_lines(tmp_path: Path) -> None:
    inv = _invocation(gpus="rocm", inputs_dir=tmp_path)
    podman = container_argv(container_spec(Target("image", "img:1"), inv))
    limits = inherited_ulimits()
    assert podman[:7 + len(limits) + 1] == [
        "podman", "run", "--rm", "--network", "host", "--ipc", "host", *limits, "--entrypoint"]
    assert ["--device", "/dev/kfd"] == podman[9 + len(limits):11 + len(limits)]
    assert "keep-groups" in podman
    assert podman[-7:] == ["img:1", "-m", IMAGE_PACKAGE, "--allow-cpu", "--events", "--report",
                           "-"]
    assert f"{tmp_path}:{CONTAINER_INPUTS}:ro" in podman
    apptainer = apptainer_argv(Target("sif", "/x.sif"), _invocation(gpus="nvidia"))
    assert apptainer[:3] == ["apptainer", "exec", "--nv"]
    assert apptainer[-8:] == ["/x.sif", "python3", "-m", IMAGE_PACKAGE, "--allow-cpu",
                              "--events", "--report", "-"]
    create, start, remove = enroot_argvs(Target("sqsh", "/x.sqsh"), _invocation(), "job1")
    assert create == ["enroot", "create", "--force", "--name", "job1", "/x.sqsh"]
    assert start[0:2] == ["enroot", "start"] and "job1" in start
    assert remove == ["enroot", "remove", "--force", "job1"]


def test_sbatch_launcher_writes_the_script(tmp_path: Path) -> None:
    outcome = validate(Target("sif", "/x.sif"), _invocation(launcher="sbatch"),
                       report_path=None, script_dir=tmp_path)
    assert outcome.script_path is not None and outcome.script_path.parent == tmp_path
    assert outcome.script_path.read_text().startswith("#!/bin/bash")


def test_event_stream_splits_events_from_output() -> None:
    events, lines = [], []
    stream = EventStream(events.append, lines.append)
    report = {"checks": [], "host": "h"}
    stream.feed(b"warning: something\n" + EVENT_PREFIX.encode() + b'{"event": "start"}\n')
    stream.feed(EVENT_PREFIX + json.dumps({"event": "report", "report": report})[:10])
    stream.feed(json.dumps({"event": "report", "report": report})[10:] + "\ntail")
    stream.close()
    assert [e["event"] for e in events] == ["start", "report"]
    assert stream.report == report
    assert lines == ["warning: something", "tail"]


def test_runner_flags_round_trip() -> None:
    """Host flags re-created for the runner parse back to the same values."""
    host = argparse.ArgumentParser()
    add_arguments(host, output=False)
    argv = ["--checks", "gemm,train", "--allow-cpu", "--peak-tflops", "1307.4",
            "--train-layers", "4", "--collective-sizes", "1M,151003136", "--compile"]
    values = vars(host.parse_args(argv))
    forwarded = iter_runner_flags(values, _runner_actions())
    runner = argparse.ArgumentParser()
    add_arguments(runner, output=True)
    again = vars(runner.parse_args(forwarded))
    for key, value in values.items():
        assert again[key] == value, key


def test_environment_passthrough_is_selective() -> None:
    env = passthrough_env({"NCCL_NET": "AWS Libfabric", "FI_PROVIDER": "cxi", "HOME": "/root",
                           "CUDA_VISIBLE_DEVICES": "0", "SSH_AUTH_SOCK": "/tmp/x"})
    assert env == {"NCCL_NET": "AWS Libfabric", "FI_PROVIDER": "cxi", "CUDA_VISIBLE_DEVICES": "0"}


def test_staged_checks_are_a_complete_package(tmp_path: Path) -> None:
    stage(tmp_path)
    package = tmp_path / IMAGE_PACKAGE
    assert (package / "__main__.py").is_file() and (package / "gpus.json").is_file()
    assert not list(package.rglob("__pycache__"))


def test_two_scripts_prepared_in_one_second_get_two_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime

    from imagebuild.validate import host

    second = datetime.datetime(2026, 11, 26, 4, 50, 1, tzinfo=datetime.UTC)
    monkeypatch.setattr(host, "utc_now", lambda: second)
    first = host.unused_script_path(tmp_path)
    assert first.name == "imagebuild-validate-20261126T045001Z.sbatch"
    first.write_text("#!/bin/sh\n")
    assert host.unused_script_path(tmp_path).name == "imagebuild-validate-20261126T045001Z-2.sbatch"
