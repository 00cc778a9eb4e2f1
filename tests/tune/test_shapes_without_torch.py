"""Every ``tune shapes`` source runs on a host without torch: the CLI in a subprocess
whose ``import torch`` fails (a meta-path hook in sitecustomize), reading real files."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagebuild.inimage.model.llama import LLAMA_CPU_SMOKE
from imagebuild.inimage.tuning.shapes import profile_training_step

from ..inimage.tuning.test_library_logs import BIASED, LOG_LINE

ROOT = Path(__file__).resolve().parents[2]
NO_TORCH = '''import sys

class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

sys.meta_path.insert(0, _NoTorch())
'''


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory):
    hook = tmp_path_factory.mktemp("no-torch")
    (hook / "sitecustomize.py").write_text(NO_TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]))
    probe = subprocess.run([sys.executable, "-c", "import torch"], env=env,
                           capture_output=True, text=True, check=False)
    assert probe.returncode != 0 and "No module named 'torch'" in probe.stderr
    return env


def shapes(env, tmp_path, *argv):
    return subprocess.run([sys.executable, "-m", "imagebuild", "tune", "shapes", *argv,
                           "--out", str(tmp_path / "problems.csv")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    where = tmp_path_factory.mktemp("sources")
    profile_training_step(str(where / "trace.json"), LLAMA_CPU_SMOKE, 16, device="cpu")
    (where / "hipblaslt.log").write_text(LOG_LINE.format(m=6144) + "\n")
    (where / "tunableop_untuned0.csv").write_text(BIASED)
    return where


@pytest.mark.parametrize("argv", [
    ["--model", "llama-3.1-8b"],
    ["--trace", "{src}/trace.json"],
    ["--file", "{src}/trace.json"],
    ["--hipblaslt-log", "{src}/hipblaslt.log"],
    ["--file", "{src}/hipblaslt.log"],
    ["--tunableop", "{src}/tunableop_untuned0.csv"],
    ["--file", "{src}/tunableop_untuned0.csv"],
])
def test_file_and_model_sources_need_no_torch(no_torch, sources, tmp_path, argv):
    proc = shapes(no_torch, tmp_path, *(a.format(src=sources) for a in argv))
    assert proc.returncode == 0, proc.stderr
    assert "problems," in proc.stdout and (tmp_path / "problems.csv").is_file()


def test_local_says_it_needs_torch(no_torch, tmp_path):
    proc = shapes(no_torch, tmp_path, "--local")
    assert proc.returncode == 2
    assert "needs torch" in proc.stderr and "Traceback" not in proc.stderr


def test_a_recorded_command_runs_without_torch_here(no_torch, tmp_path):
    proc = shapes(no_torch, tmp_path, "--", sys.executable, "-c", "print('no GEMM')")
    assert proc.returncode == 2 and "recorded no GEMM" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_in_image_cli_tunes_without_torch(no_torch, sources, tmp_path):
    """The image's own entry point (``python -m imagebuild.inimage``, what `tune` runs in a
    container) loads without torch too: a hipBLASLt-only image or a bare node can tune."""
    proc = subprocess.run([sys.executable, "-m", "imagebuild.inimage", "tune", "shapes",
                           "--trace", str(sources / "trace.json"),
                           "--out", str(tmp_path / "problems.csv")],
                          env=no_torch, cwd=tmp_path, capture_output=True, text=True,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "problems.csv").is_file()
