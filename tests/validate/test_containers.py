"""The container launchers against real engines: entrypoint, PYTHONPATH, mounts, the event
stream, the exit code and the host-written report.

The image is the Debian test base (python3, no torch); the mounted "checks" are a stand-in
runner that reports what it received, so these tests exercise the launch plumbing. The
real checks in a real torch image run in the end-to-end image test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from imagebuild.engine.podman import inherited_ulimits
from imagebuild.inimage.run_report import EVENT_PREFIX
from imagebuild.recipe.site_runtime import Bind
from imagebuild.validate.host import validate
from imagebuild.validate.invocation import Invocation, prepare_inputs
from imagebuild.validate.stage_checks import IMAGE_LIB, IMAGE_PACKAGE
from imagebuild.validate.target import Target

STAND_IN = f'''
import json, os, sys
args = sys.argv[1:]
thresholds = None
if "--thresholds" in args:
    with open(args[args.index("--thresholds") + 1]) as f:
        thresholds = json.load(f)
print("a warning that is not an event", flush=True)
def emit(kind, **payload):
    print({EVENT_PREFIX!r} + json.dumps({{"event": kind, **payload}}), flush=True)
emit("start", checks=["gemm"], world_size=1, mode="cpu", host="container")
result = {{"name": "gemm", "status": "failed", "reason": "stand-in", "cause": None,
          "figures": {{}}, "details": [], "duration_s": 0.0}}
emit("check_finished", result=result)
emit("report", report={{"host": "container", "checks": [result], "args": args,
                       "pythonpath": os.environ.get("PYTHONPATH"),
                       "nccl": os.environ.get("NCCL_SOCKET_IFNAME"),
                       "cxi": os.environ.get("CXI_FORK_SAFE"),
                       "ld_library_path": os.environ.get("LD_LIBRARY_PATH"),
                       "site_files": sorted(os.listdir("/site/libfabric/lib64"))
                       if os.path.isdir("/site/libfabric/lib64") else None,
                       "thresholds": thresholds, "summary": {{"exit_code": 1}}}})
sys.exit(1)
'''


@pytest.fixture
def stand_in_checks(tmp_path: Path) -> Path:
    root = tmp_path / "checks"
    package = root / IMAGE_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text(STAND_IN)
    for path in [root, package, *package.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def _run(launcher: str, image: str, checks: Path, tmp_path: Path, **site: Any):
    inputs, flags = prepare_inputs({"train_min_mfu": 0.3}, container=True)
    invocation = Invocation(launcher=launcher, runner_args=("--allow-cpu", *flags), gpus="none",
                            inputs_dir=inputs, mount_checks=checks,
                            env={"NCCL_SOCKET_IFNAME": "hsn0", **site.pop("env", {})}, **site)
    events, lines = [], []
    outcome = validate(Target("image", image), invocation, report_path=tmp_path / "r.json",
                       on_event=events.append, on_line=lines.append)
    return outcome, events, lines


def _assert_round_trip(outcome, events, lines, tmp_path: Path, launcher: str, image: str) -> None:
    assert outcome.exit_code == 1
    assert [e["event"] for e in events] == ["start", "check_finished", "report"]
    assert "a warning that is not an event" in lines
    written = json.loads((tmp_path / "r.json").read_text())
    assert written == outcome.report
    assert written["runtime"] == launcher and written["image"] == image
    assert written["args"][:1] == ["--allow-cpu"]
    assert written["args"][-3:] == ["--events", "--report", "-"]
    assert written["pythonpath"] == IMAGE_LIB
    assert written["nccl"] == "hsn0"
    assert written["thresholds"] == {"train_min_mfu": 0.3}


@pytest.mark.integration
@pytest.mark.docker
def test_docker_launcher_round_trip(base_image: str, stand_in_checks: Path,
                                    tmp_path: Path) -> None:
    outcome, events, lines = _run("docker", base_image, stand_in_checks, tmp_path)
    _assert_round_trip(outcome, events, lines, tmp_path, "docker", base_image)


@pytest.mark.integration
def test_podman_launcher_round_trip(podman_base_image: str, stand_in_checks: Path,
                                    tmp_path: Path) -> None:
    probe = subprocess.run(["podman", "run", "--rm", *inherited_ulimits(), podman_base_image,
                            "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        # Seen in unprivileged sandboxes: runc may not raise RLIMIT_NOFILE/NPROC there.
        pytest.skip(f"podman cannot start any container on this machine: "
                    f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else probe.returncode}")
    outcome, events, lines = _run("podman", podman_base_image, stand_in_checks, tmp_path)
    _assert_round_trip(outcome, events, lines, tmp_path, "podman", podman_base_image)


@pytest.mark.integration
@pytest.mark.docker
def test_docker_launcher_applies_the_site_binds_environment_and_loader_path(
        base_image: str, stand_in_checks: Path, tmp_path: Path) -> None:
    """What a site profile asks (LUMI: /opt/cray bound, its libfabric directory first on
    LD_LIBRARY_PATH, CXI_FORK_SAFE) reaches the process inside the container."""
    libfabric = tmp_path / "host-libfabric"
    libfabric.mkdir()
    (libfabric / "libfabric.so.1").write_text("stand-in")
    libfabric.chmod(0o755)
    (libfabric / "libfabric.so.1").chmod(0o644)
    outcome, events, lines = _run(
        "docker", base_image, stand_in_checks, tmp_path, env={"CXI_FORK_SAFE": "1"},
        binds=(Bind(str(libfabric), "/site/libfabric/lib64", read_only=True),),
        library_dir="/site/libfabric/lib64")
    _assert_round_trip(outcome, events, lines, tmp_path, "docker", base_image)
    report = outcome.report
    assert report["site_files"] == ["libfabric.so.1"]
    assert report["cxi"] == "1"
    # First on the loader path, ahead of whatever the image sets (the base sets nothing).
    assert report["ld_library_path"].split(":")[0] == "/site/libfabric/lib64"
