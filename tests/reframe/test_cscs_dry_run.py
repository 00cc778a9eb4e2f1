"""reframe-checks/ with real ReFrame against CSCS's own checks: imagebuild_megatronlm.py
(the Llama check) and imagebuild_megatronlm_optimized.py (the optimized Llama-3-8B check).

CSCS's checks come from ../shared/fixtures/sources/cscs-reframe-tests.bundle (commit
2f81355, one commit deep: unbundled and checked out here, as `git clone` of a shallow bundle
fails). ReFrame from PyPI (the test extra) runs each wrapper with ``--dry-run`` on a test
configuration of an MI300A partition (mi300a_config.py): it sets the test up and writes the
job script and the Container Engine EDF as it would submit them, without submitting. The
assertions are on what it wrote: the image and EDF from imagebuild's, ``writable = true``
kept, no ``git clone`` or download, the image's Megatron-LM directory, Megatron's arguments;
for the optimized check also the image's tuner and the tuning bundle (an EDF rendered as
``imagebuild tune edf`` renders it, with a bundle holding a TE algorithm file and an RCCL
tuner configuration) in place of the check's files on /capstor, and its switches.
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
OPTIMIZED = REPO / "reframe-checks" / "imagebuild_megatronlm_optimized.py"
EDF = REPO / "envs" / "rocm-7.1.1.toml"
CSCS_COMMIT = "2f813557625e1294b277a698338f82f398bea7b8"
CAPSTOR_TUNER = "/capstor/store/cscs/cscs/public/reframe/resources/rccl-tuner"


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


def dry_run(cscs: Path, where: Path, *settings: str, check: Path = CHECK,
            name: str = "PyTorchMegatronLM_AMD_imagebuild", edf: Path = EDF
            ) -> tuple[str, Path]:
    """(ReFrame's output, the test's stage directory) of a dry run of a wrapper."""
    reframe = shutil.which("reframe", path=str(Path(sys.executable).parent))
    assert reframe, "reframe (reframe-hpc, in the test extra) is not installed"
    env = {**os.environ, "CSCS_REFRAME_TESTS": str(cscs), "SCRATCH": str(where / "scratch"),
           "HOME": str(where), "RFM_REPORT_FILE": str(where / "report.json")}
    done = subprocess.run(
        [reframe, "-C", str(Path(__file__).with_name("mi300a_config.py")), "-c", str(check),
         "-n", name, "-S", f"imagebuild_edf={edf}",
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


# --- the optimized check ------------------------------------------------------------------

@pytest.fixture(scope="module")
def tuned_edf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rocm-7.1.1's EDF with a tuning bundle (a TE algorithm file and an RCCL tuner
    configuration) mounted and loaded, rendered as `imagebuild tune edf` renders it."""
    from imagebuild.inimage.tuning.bundle_format import Bundle, write_bundle
    from imagebuild.recipe.site import load_site
    from imagebuild.render.edf import render_edf
    from imagebuild.tune.apply import runtime_tuning

    where = tmp_path_factory.mktemp("tuned")
    bundle_dir = where / "bundle"
    bundle = Bundle(image_digest="", recipe="rocm-7.1.1", hipblaslt_git_version=None,
                    torch_version="2.9.1", gpu_arch="gfx942:sramecc+:xnack-", cu_count=228,
                    files={"te_algo": "te_hipblaslt_algos.csv",
                           "rccl_tuner_config": "nccl_tuner.conf"})
    write_bundle(bundle_dir, bundle)
    for name in bundle.files.values():
        (bundle_dir / name).write_text("stand-in\n")
    plain = tomllib.loads(EDF.read_text())
    text = render_edf(recipe="rocm-7.1.1", image=plain["image"],
                      site=load_site("cscs-beverin"), rocm_version="7.1.1",
                      workdir=plain.get("workdir"),
                      tuning=runtime_tuning(bundle_dir, bundle))
    path = where / "rocm-7.1.1-tuning.toml"
    path.write_text(text)
    return path


def optimized(cscs: Path, where: Path, edf: Path, *settings: str) -> tuple[str, Path]:
    return dry_run(cscs, where, "default_num_nodes=2", *settings, check=OPTIMIZED,
                   name="PyTorchMegatronLM_AMD_Optimized_imagebuild", edf=edf)


@pytest.fixture(scope="module")
def optimized_run(cscs_checks: Path, tuned_edf: Path,
                  tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return optimized(cscs_checks, tmp_path_factory.mktemp("optimized"), tuned_edf)


def test_the_optimized_check_dry_runs_with_the_tuned_edf(optimized_run: tuple[str, Path],
                                                         tuned_edf: Path) -> None:
    out, stage = optimized_run
    assert "PyTorchMegatronLM_AMD_Optimized_imagebuild %model=llama3-8b" in out
    assert "@beverin:mi300+builtin" in out and "1/1 test case(s)" in out
    edf = tomllib.loads(tuned_edf.read_text())
    written = tomllib.loads((stage / "rfm_env.toml").read_text())
    assert written["image"] == edf["image"] and written["writable"] is True
    assert set(edf["mounts"]) <= set(written["mounts"])
    bundle = next(m for m in edf["mounts"] if m.endswith(":/opt/imagebuild/tuning:ro"))
    assert bundle in written["mounts"]
    assert f"{stage}:/rfm_workdir" in written["mounts"]
    assert f"{stage}:{stage}" in written["mounts"]  # the check's own mounts stay
    assert written["env"] == edf["env"]
    assert written["env"]["NCCL_TUNER_CONFIG_FILE"] == "/opt/imagebuild/tuning/nccl_tuner.conf"
    assert written["env"]["TE_HIPBLASLT_ALGO_LOAD"] == \
        "/opt/imagebuild/tuning/te_hipblaslt_algos.csv"
    assert written["annotations"] == {"com": {"hooks": {"cxi": {"enabled": "true"}}}}
    job = (stage / "rfm_job.sh").read_text()
    assert f"--environment={stage}/rfm_env.toml" in job


def test_the_optimized_check_uses_the_images_megatron_and_downloads_nothing(
        optimized_run: tuple[str, Path]) -> None:
    _, stage = optimized_run
    job = (stage / "rfm_job.sh").read_text()
    assert "git clone" not in job and "wget" not in job and "git checkout" not in job
    assert "export MEGATRON_LM_DIR=/opt/megatron-lm\n" in job
    assert "export PROJECT_DIR=$PWD/logs/Meg-Runs/$PROJECT_NAME\n" in job
    [srun] = [line for line in job.splitlines() if line.startswith("srun ")]
    assert "torchrun  --nproc_per_node 4 --nnodes 2 " in srun
    assert "$MEGATRON_LM_DIR/pretrain_gpt.py --tensor-model-parallel-size 1 " in srun
    for argument in ("--num-layers 32", "--hidden-size 4096", "--ffn-hidden-size 14336",
                     "--seq-length 8192", "--global-batch-size 512", "--num-query-groups 8",
                     "--use-mcore-models", "--use-flash-attn", "--bf16", "--mock-data",
                     "--tokenizer-type NullTokenizer --vocab-size 32000"):
        assert argument in srun, argument
    assert "Llama2Tokenizer" not in srun


def test_the_optimized_checks_tuner_is_the_images_with_imagebuilds_switches(
        optimized_run: tuple[str, Path]) -> None:
    _, stage = optimized_run
    job = (stage / "rfm_job.sh").read_text()
    assert CAPSTOR_TUNER not in job + (stage / "rfm_env.toml").read_text()
    assert "NCCL_TUNER_PLUGIN" not in job  # the image's ENV names its own tuner
    assert "NCCL_TUNER_PLUGIN_SAVE_REQUESTS" not in job and "NCCL_TUNER_TUNING_FILE" not in job
    assert "export IMAGEBUILD_TUNER_RECORD=$SCRATCH/tuner-record\n" in job
    assert "mkdir -p $SCRATCH/tuner-record\n" in job
    # GEMM tuning on, as in the check: TE selects online what the bundle's file lacks
    assert "export TE_HIPBLASLT_TUNING_RUN_COUNT=10\n" in job
    assert "export TE_HIPBLASLT_TUNING_ALGO_COUNT=100\n" in job
    # the network is the EDF's (the site's, for this image), not the check's copy
    assert "export NCCL_NET=" not in job and "export FI_CXI" not in job
    assert "export NCCL_PROTO=" not in job


def test_the_optimized_checks_switches_turn_off_and_a_tuner_config_is_bound(
        cscs_checks: Path, tmp_path: Path) -> None:
    config = tmp_path / "rccl" / "nccl_tuner.conf"
    config.parent.mkdir()
    config.write_text("allreduce,0,-1,ring,simple,-1,-1,-1\n")
    _, stage = optimized(cscs_checks, tmp_path, EDF, "te_gemm_tuning=false",
                         "tuner_record=false", f"rccl_tuner_config={config}")
    job = (stage / "rfm_job.sh").read_text()
    assert "TE_HIPBLASLT_TUNING" not in job and "IMAGEBUILD_TUNER_RECORD" not in job
    written = tomllib.loads((stage / "rfm_env.toml").read_text())
    assert written["env"]["NCCL_TUNER_CONFIG_FILE"] == str(config)
    assert f"{config}:{config}:ro" in written["mounts"]
    assert "TE_HIPBLASLT_ALGO_LOAD" not in written["env"]  # the plain EDF loads no bundle
