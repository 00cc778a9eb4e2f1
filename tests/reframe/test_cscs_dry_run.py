"""reframe-checks/imagebuild_megatronlm.py with real ReFrame against CSCS's own checks.

CSCS's checks come from ../shared/fixtures/sources/cscs-reframe-tests.bundle (commit
2f81355, one commit deep: unbundled and checked out here, as `git clone` of a shallow bundle
fails). ReFrame from PyPI (the test extra) runs the wrapper with ``--dry-run`` on a test
configuration of an MI300A partition (mi300a_config.py): it sets the test up and writes the
job script and the Container Engine EDF as it would submit them, without submitting. The
assertions are on what it wrote: the image and EDF from imagebuild's, ``writable = true``
kept, no ``git clone`` or download, the image's Megatron-LM directory, Megatron's arguments.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from testbed.source_mirror import fixtures_dir

pytestmark = [pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "reframe-checks" / "imagebuild_megatronlm.py"
EDF = REPO / "envs" / "rocm-7.1.1.toml"
CSCS_COMMIT = "2f813557625e1294b277a698338f82f398bea7b8"


@pytest.fixture(scope="module")
def cscs_checks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    bundle = fixtures_dir() / "cscs-reframe-tests.bundle"
    assert bundle.is_file(), bundle
    checkout = tmp_path_factory.mktemp("cscs-reframe-tests")
    for argv in (["init", "-q"], ["bundle", "unbundle", str(bundle)],
                 ["-c", "advice.detachedHead=false", "checkout", "-q", CSCS_COMMIT]):
        subprocess.run(["git", "-C", str(checkout), *argv], check=True, capture_output=True)
    assert (checkout / "checks/apps/pytorch/pytorch_megatronlm_amd.py").is_file()
    return checkout


def dry_run(cscs: Path, where: Path, *settings: str) -> tuple[str, Path]:
    """(ReFrame's output, the test's stage directory) of a dry run of the wrapper."""
    reframe = shutil.which("reframe", path=str(Path(sys.executable).parent))
    assert reframe, "reframe (reframe-hpc, in the test extra) is not installed"
    env = {**os.environ, "CSCS_REFRAME_TESTS": str(cscs), "SCRATCH": str(where / "scratch"),
           "HOME": str(where), "RFM_REPORT_FILE": str(where / "report.json")}
    done = subprocess.run(
        [reframe, "-C", str(Path(__file__).with_name("mi300a_config.py")), "-c", str(CHECK),
         "-n", "PyTorchMegatronLM_AMD_imagebuild", "-S", f"imagebuild_edf={EDF}",
         *[a for s in settings for a in ("-S", s)], "--prefix", str(where / "run"),
         "--dry-run"], capture_output=True, text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [stage] = (where / "run" / "stage" / "beverin" / "mi300" / "builtin").iterdir()
    return done.stdout, stage


@pytest.fixture(scope="module")
def two_nodes(cscs_checks: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> tuple[str, Path]:
    return dry_run(cscs_checks, tmp_path_factory.mktemp("dry-run"), "default_num_nodes=2")


def test_the_dry_run_passes_on_the_mi300a_partition(two_nodes: tuple[str, Path]) -> None:
    out, stage = two_nodes
    assert "PyTorchMegatronLM_AMD_imagebuild %model=llama2-7b" in out
    assert "@beverin:mi300+builtin" in out and "1/1 test case(s)" in out
    assert (stage / "rfm_job.sh").is_file() and (stage / "rfm_env.toml").is_file()


def test_the_container_is_imagebuilds_image_with_its_edf(two_nodes: tuple[str, Path]) -> None:
    _, stage = two_nodes
    edf = tomllib.loads(EDF.read_text())
    written = tomllib.loads((stage / "rfm_env.toml").read_text())
    assert written["image"] == edf["image"]
    assert written["writable"] is True and edf["writable"] is True
    assert set(edf["mounts"]) <= set(written["mounts"])
    assert f"{stage}:/rfm_workdir" in written["mounts"]  # the check's own mount
    assert written["env"] == edf["env"]
    assert written["annotations"] == {"com": {"hooks": {"cxi": {"enabled": "true"}}}}
    assert "aws_ofi_nccl" not in (stage / "rfm_env.toml").read_text()
    job = (stage / "rfm_job.sh").read_text()
    assert f"--environment={stage}/rfm_env.toml" in job


def test_nothing_is_downloaded_and_megatron_is_the_images(two_nodes: tuple[str, Path]) -> None:
    _, stage = two_nodes
    job = (stage / "rfm_job.sh").read_text()
    assert "git clone" not in job and "wget" not in job and "git checkout" not in job
    assert "export MEGATRON_LM_DIR=/opt/megatron-lm\n" in job
    assert "export PROJECT_DIR=$PWD/logs/Meg-Runs/$PROJECT_NAME\n" in job


def test_the_job_and_megatrons_arguments(two_nodes: tuple[str, Path]) -> None:
    _, stage = two_nodes
    job = (stage / "rfm_job.sh").read_text()
    assert "#SBATCH --ntasks=2\n" in job and "#SBATCH --ntasks-per-node=1\n" in job
    assert "#SBATCH --cpus-per-task=96\n" in job and "#SBATCH -pmi300\n" in job
    [srun] = [line for line in job.splitlines() if line.startswith("srun ")]
    assert "torchrun  --nproc_per_node 4 --nnodes 2 " in srun
    assert "$MEGATRON_LM_DIR/pretrain_gpt.py --tensor-model-parallel-size 4 " in srun
    assert "--tokenizer-type NullTokenizer --vocab-size 32000" in srun
    assert "Llama2Tokenizer" not in srun and "--mock-data" in srun
    assert "--bf16" in srun and "--exit-interval=10" in srun


def test_a_named_tokenizer_is_copied_in(cscs_checks: Path, tmp_path: Path) -> None:
    model = tmp_path / "tokenizer.model"
    model.write_bytes(b"sentencepiece stand-in")
    _, stage = dry_run(cscs_checks, tmp_path, f"tokenizer_model={model}")
    job = (stage / "rfm_job.sh").read_text()
    assert f"mkdir -p tokenizer && cp {model} {stage}/tokenizer/tokenizer.model" in job
    assert f"--tokenizer-type Llama2Tokenizer --tokenizer-model {stage}/tokenizer/" \
           "tokenizer.model" in job
