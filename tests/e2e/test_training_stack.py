"""The training stack in the image, built for real: Megatron-LM from a git mirror at the
locked commit, its dataset helpers compiled in the build, and Megatron itself judging the
``megatron`` check's argument list (the ReFrame check's) and building the model on CPU; and
TransformerEngine's PyTorch extension, locked as a source archive and compiled in the build
against the image's torch.

The CPU demo recipe's twin gets a ``megatron`` section naming the Swiss AI fork by branch;
``imagebuild lock --git-mirror`` pins the branch to its commit in ../shared/fixtures/sources
(served by ``git daemon`` as an air-gapped site would), and the same template the ROCm
recipes render builds it. Megatron's Python requirements come from PyPI into the lock. Its
``transformer_engine`` section takes the release from an index on 127.0.0.1 holding files
named like repo.radeon.com's, with their requirements (testbed/transformer_engine.py); the
extension there is a real torch C++ extension, not TransformerEngine's code.

Not shown here (only on a GPU, with ROCm): a Megatron training iteration (its forward pass
calls torch.cuda.current_device()), TransformerEngine's own kernels and their hipcc build,
flash attention, RCCL.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import tomllib
from pathlib import Path

import pytest

from imagebuild.cli import main
from testbed.cpu_recipe import torch_wheel, write_recipe
from testbed.source_mirror import SourceMirror
from testbed.transformer_engine import TE_VERSION, make_transformer_engine
from tests.support.engine_env import imagebuild_env
from tests.support.indexserver import IndexServer

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

NAME = "cpu-megatron"
IMAGE = f"imagebuild/{NAME}:latest"
DOCKER = "/usr/bin/docker"
#: The fixture bundle's `main` (../shared/fixtures/sources/README.md).
SWISS_AI_COMMIT = "81d44dbe25c22190989fa8a12284bdb8d1303b40"
MEGATRON = """\
megatron:
  enabled: true
  repository: https://github.com/swiss-ai/Megatron-LM.git
  ref: main
  pypi: [numpy, einops, six, regex, sentencepiece, tiktoken, pyyaml, packaging, pybind11]
transformer_engine:
  enabled: true
  version: {version}
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, registry_base_image: str,
          docker_engine) -> dict:
    index = tmp_path_factory.mktemp("index")
    wheel = torch_wheel()
    (index / wheel.name).symlink_to(wheel)
    engine_files = make_transformer_engine(index)
    project = tmp_path_factory.mktemp("project")
    recipe = write_recipe(project, NAME, registry_base_image)
    recipe.write_text(recipe.read_text() + MEGATRON.format(version=TE_VERSION))
    with SourceMirror(tmp_path_factory.mktemp("mirror")) as mirror, \
            IndexServer(index) as served, \
            imagebuild_env(project, tmp_path_factory.mktemp("cache")):
        mirrors = [f"--git-mirror={source}={target}" for source, target in mirror.mirrors.items()]
        assert main(["lock", NAME, "--index-url", served.url, *mirrors]) == 0
        assert main(["build", NAME]) == 0
    lock = tomllib.loads((project / "recipes" / f"pylock.{NAME}.toml").read_text())
    return {"project": project, "lock": lock, "engine_files": engine_files}


def run(*command: str, check: bool = True, volume: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    """In the image as a squashfs would run it: read-only, no network."""
    mount = ["-v", volume] if volume else []
    result = subprocess.run([DOCKER, "run", "--rm", "--read-only", "--tmpfs", "/tmp",
                             "--network", "none", *mount, IMAGE, *command],
                            capture_output=True, text=True, timeout=600, check=False)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_the_lock_pins_megatron_and_its_requirements(built: dict) -> None:
    source = built["lock"]["tool"]["imagebuild"]["sources"]["megatron"]
    assert source["ref"] == "main"
    assert source["commit"] == SWISS_AI_COMMIT
    assert source["repository"].startswith("git://127.0.0.1:")
    names = {p["name"] for p in built["lock"]["packages"]}
    assert {"einops", "sentencepiece", "tiktoken", "regex", "six", "pybind11"} <= names


def test_megatron_is_installed_at_the_locked_commit_and_recorded(built: dict) -> None:
    manifest = json.loads(run("cat", "/opt/imagebuild/manifest.json").stdout)
    megatron = manifest["megatron"]
    assert megatron["commit"] == SWISS_AI_COMMIT
    assert megatron["dir"] == "/opt/megatron-lm"
    assert megatron["dataset_helpers"] == ["megatron.core.datasets.helpers_cpp"]
    assert run("sh", "-c", "echo $MEGATRON_LM_DIR").stdout.strip() == "/opt/megatron-lm"
    assert run("test", "-f", "/opt/megatron-lm/pretrain_gpt.py").returncode == 0
    assert run("test", "!", "-e", "/opt/megatron-lm/.git").returncode == 0


def test_megatron_imports_from_the_venv_without_pythonpath(built: dict) -> None:
    found = run("python", "-c", "import megatron.core, sys; print(megatron.core.__file__)")
    assert found.stdout.strip() == "/opt/megatron-lm/megatron/core/__init__.py"


def test_the_start_of_a_job_finds_the_helpers_built_on_a_read_only_image(built: dict) -> None:
    # What Megatron's rank 0 does at every start (initialize._compile_dependencies).
    started = run("python", "-c", "from megatron.core.datasets.utils import compile_helpers; "
                  "compile_helpers(); from megatron.core.datasets import helpers_cpp; "
                  "print(helpers_cpp.__file__)")
    assert "Nothing to be done" in started.stdout + started.stderr
    assert started.stdout.strip().endswith(".so")


def test_bytecode_was_compiled_at_build_time(built: dict) -> None:
    listed = run("sh", "-c", "ls /opt/megatron-lm/megatron/core/__pycache__/ | head -1")
    assert listed.stdout.strip().endswith(".pyc")


def test_the_megatron_check_runs_megatrons_parser_and_builds_the_model_on_cpu(
        built: dict, tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    done = run("imagebuild", "validate", "--cpu", "--checks", "megatron", "--report",
               "/out/report.json", check=False, volume=f"{tmp_path}:/out")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    result = next(r for r in report["checks"] if r["name"] == "megatron")
    assert result["status"] == "passed", result
    figures = result["figures"]
    assert figures["workload"] == "cpu-probe"
    assert figures["gpu_arguments"]["parsed"] is True
    assert figures["gpu_arguments"]["transformer_impl"] == "transformer_engine"
    for flag in ("--use-mcore-models", "--bf16", "--use-distributed-optimizer", "--mock-data",
                 "--use-flash-attn", "--log-throughput", "--exit-interval"):
        assert flag in figures["gpu_arguments"]["arguments"]
    model = figures["cpu_model"]
    assert model["class"] == "GPTModel" and model["parameters"] > 0
    assert model["normalization"] == "RMSNorm" and model["gated_linear_unit"] is True


def test_the_lock_pins_transformer_engine_wheels_and_its_extensions_source(built: dict) -> None:
    packages = {p["name"]: p for p in built["lock"]["packages"]}
    for name in ("transformer-engine", "transformer-engine-rocm"):
        assert packages[name]["version"] == TE_VERSION
        assert packages[name]["wheels"][0]["url"].endswith(built["engine_files"][name].name)
    sdist = packages["transformer-engine-torch"]["sdist"]
    assert sdist["url"].endswith(f"transformer_engine_torch-{TE_VERSION}.tar.gz")
    assert sdist["hashes"]["sha256"] == hashlib.sha256(
        built["engine_files"]["transformer-engine-torch"].read_bytes()).hexdigest()
    # What the wheels and the archive require, and what its build needs, are locked too.
    assert {"pydantic", "importlib-metadata", "setuptools", "wheel"} <= set(packages)


def test_the_extension_was_compiled_against_the_images_torch_and_loads(built: dict) -> None:
    done = run("python", "-c", "import torch, transformer_engine_torch as te; "
               "print(te.scale(torch.ones(2), 3.0).tolist())")
    assert done.stdout.strip() == "[3.0, 3.0]"
    manifest = json.loads(run("cat", "/opt/imagebuild/manifest.json").stdout)
    engine = manifest["transformer_engine"]
    assert engine["version"] == TE_VERSION
    assert engine["built"]["version"] == TE_VERSION
    [extension] = engine["built"]["files"]
    assert extension.startswith("/opt/venv/lib/python3.11/site-packages/transformer_engine_torch")
    assert any(name.startswith("libc10") for name in engine["built"]["links"][extension])
