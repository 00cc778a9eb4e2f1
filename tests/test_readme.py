"""The README's front door is true: the commands it says run here do, every document it
links exists, every command has a row, and it stays short (the details live in docs/)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.commands import COMMANDS

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def _runnable_here() -> list[str]:
    """The shell block after "Try these here"."""
    after = README.split("Try these here", 1)[1]
    block = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert block, "no ```sh block after 'Try these here'"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.parametrize("line", _runnable_here())
def test_the_commands_the_readme_runs_here_succeed(line: str) -> None:
    words = line.split()
    assert words[0] == "imagebuild"
    done = subprocess.run([sys.executable, "-m", "imagebuild", *words[1:]], cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr[-2000:]}"


def test_every_linked_document_exists() -> None:
    links = re.findall(r"\]\(([^)#]+)\)", README)
    missing = [link for link in links if not link.startswith("http")
               and not (REPO / link).exists()]
    assert links and missing == []


def test_every_command_has_a_row() -> None:
    table = README.split("## Commands", 1)[1]
    missing = [name.rstrip("_") for name in COMMANDS
               if f"`imagebuild {name.rstrip('_')}" not in table]
    assert missing == []


def test_the_front_door_fits_on_two_screens() -> None:
    assert len(README.splitlines()) <= 150


def _quick_start_line(prefix: str) -> str:
    """The quick start's command starting with ``prefix``, continuation lines joined and the
    comment dropped."""
    after = README.split("## Quick start", 1)[1]
    block = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert block, "no ```sh block in the quick start"
    joined = re.sub(r"\\\n\s*", "", block.group(1))
    lines = [line.split("  #", 1)[0].strip() for line in joined.splitlines()]
    found = [line for line in lines if line.startswith(prefix)]
    assert len(found) == 1, f"{prefix!r} in the quick start: {found}"
    return found[0]


def test_the_quick_starts_two_node_job_script_is_written(tmp_path: Path) -> None:
    """`validate ... --launcher sbatch --nodes 2 --site cscs-beverin --environment ...` as the
    README writes it, from another directory (the script lands there), with no Docker to be
    asked: a job for Beverin's 4-GPU MI300A nodes on their Slingshot interfaces."""
    line = _quick_start_line("imagebuild validate rocm-7.0.2 --launcher sbatch")
    words = line.replace("$PWD", str(REPO)).split()
    env = {**os.environ, "IMAGEBUILD_PROJECT": str(REPO), "PYTHONPATH": str(REPO),
           "DOCKER_HOST": "unix:///nonexistent.sock"}
    env.pop("IMAGEBUILD_SITE", None)
    done = subprocess.run([sys.executable, "-m", "imagebuild", *words[1:]], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{line}: exit {done.returncode}\n{done.stderr[-2000:]}"
    [script] = tmp_path.glob("imagebuild-validate-*.sbatch")
    assert done.stdout.strip() == f"wrote {script.name}; submit it with: sbatch {script.name}"
    text = script.read_text()
    assert "#SBATCH --nodes=2\n" in text
    assert "#SBATCH --gpus-per-node=4\n" in text and "#SBATCH --ntasks-per-node=4\n" in text
    assert "export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3\n" in text
    assert "export GLOO_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3\n" in text
    edf = REPO / "envs" / "rocm-7.0.2.toml"
    assert edf.is_file()
    runs = [s for s in text.splitlines() if s.startswith("srun ")]
    # the doctor on each node, then the checks: both in the EDF's container
    assert len(runs) == 2 and all(f"--environment={edf}" in s for s in runs)
    assert "imagebuild_checks --system cscs-beverin --expect-net-provider cxi " \
           "--expect-binding" in runs[1]


def test_the_doctor_sample_is_what_doctor_prints(tmp_path: Path) -> None:
    """The README's doctor sample, run again on the node tree it names (built from the
    committed fixtures: the mi250x-lumi node, case driver-6.3-lumi)."""
    from tests.inimage.doctor.conftest import build_case
    from tests.support.doc_samples import assert_reproduced, run_sample, sample

    found = sample("README.md", "imagebuild doctor")
    case = build_case("driver-6.3-lumi", tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("HSA_XNACK", "IMAGEBUILD_SITE")}
    assert_reproduced(found, run_sample(found, tmp_path, env={**env, **case.env}))
