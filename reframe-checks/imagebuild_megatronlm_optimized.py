# CSCS's optimized Megatron-LM check run on an imagebuild image, with the image's own
# Megatron-LM, tuner and tuning bundle.
#
# The check (eth-cscs/cscs-reframe-tests, checks/apps/pytorch/
# pytorch_megatronlm_amd_optimized.py, class PyTorchMegatronLM_AMD_Optimized: Llama-3-8B,
# seq 8192, global batch 512, the Lugano network variables, GEMM tuning, an RCCL tuner) is
# used as it is, through a subclass with the check's Container Engine mixin, as its
# PyTorchMegatronLM_AMD_Optimized_CE does; that class is not the base because its image is
# a fixture that `enroot import`s rocm/megatron-lm from Docker Hub. What changes:
# - the image and its Container Engine settings come from the EDF imagebuild wrote
#   (image, mounts, its other top-level keys such as `writable = true`, [env],
#   [annotations]); the network variables (NCCL_NET, NCCL_PROTO, FI_CXI_*, ...) are the
#   EDF's, which the site profile sets for this image, not the check's copy of Beverin's;
# - Megatron-LM is the image's copy at /opt/megatron-lm (MEGATRON_LM_DIR) instead of a
#   run-time git clone; its logs and checkpoints go to the stage directory; nothing is
#   downloaded (the tokenizer: -S tokenizer_model=..., else Megatron's NullTokenizer);
# - the RCCL tuner is the image's (recipe `rccl_tuner:`, which the image names in
#   NCCL_TUNER_PLUGIN) instead of the check's library on /capstor, and it reads
#   imagebuild's configuration: the tuning bundle's when the EDF is the one `imagebuild
#   tune edf BUNDLE RECIPE --site cscs-beverin` wrote (it mounts the bundle at
#   /opt/imagebuild/tuning and sets NCCL_TUNER_CONFIG_FILE), or the file `imagebuild tune
#   rccl --sweep-results ... --out DIR` wrote (-S rccl_tuner_config=DIR/nccl_tuner.conf);
# - the check's tuner recording (its tuner's NCCL_TUNER_PLUGIN_SAVE_REQUESTS and
#   NCCL_TUNER_TUNING_FILE) is the image tuner's: IMAGEBUILD_TUNER_RECORD=DIR (-S
#   tuner_record_dir=..., default $SCRATCH/tuner-record; -S tuner_record=false turns it off),
#   which `imagebuild tune rccl --records DIR` reads;
# - GEMM tuning (the check's gemm_tuning, on by default) keeps TransformerEngine's online
#   selection (TE_HIPBLASLT_TUNING_RUN_COUNT=10, _ALGO_COUNT=100); with a bundle's
#   TE file in the EDF (TE_HIPBLASLT_ALGO_LOAD) TE takes the file's algorithms and selects
#   online only for GEMMs the file lacks (ROCm/TransformerEngine README, "GEMM tuning with
#   hipBlasLt"); -S te_gemm_tuning=false runs the bundle's algorithms alone.
#
# Python >= 3.11 (the EDF is read with tomllib; ReFrame 4.10 itself takes 3.10):
#   export CSCS_REFRAME_TESTS=/path/to/cscs-reframe-tests
#   reframe -C $CSCS_REFRAME_TESTS/config/cscs.py -c reframe-checks/imagebuild_megatronlm_optimized.py \
#       -n PyTorchMegatronLM_AMD_Optimized_imagebuild \
#       -S imagebuild_edf=$PWD/artifacts/rocm-7.1.1-tuning.toml -r

import os
import pathlib
import sys

import reframe as rfm
import reframe.utility.typecheck as typ
from reframe.core.builtins import run_after, variable

_CHECKS = os.environ.get("CSCS_REFRAME_TESTS")
if not _CHECKS:
    raise ImportError("set CSCS_REFRAME_TESTS to a checkout of eth-cscs/cscs-reframe-tests")
for _directory in ("checks/apps/pytorch", "checks/mixins"):
    sys.path.insert(0, str(pathlib.Path(_CHECKS) / _directory))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from container_engine import ContainerEngineMixin
from imagebuild_edf import local_tokenizer, read_edf, use_edf, without_downloads
from pytorch_megatronlm_amd_optimized import PyTorchMegatronLM_AMD_Optimized

#: The check's network variables: the EDF's [env] sets the network for this image.
NETWORK_PREFIXES = ("NCCL_NET", "NCCL_CROSS_NIC", "NCCL_PROTO", "FI_")
#: The check's RCCL tuner, its configuration and its recording switch (CSCS's files).
CHECK_TUNER = ("NCCL_TUNER_PLUGIN", "NCCL_TUNER_CONFIG_FILE", "NCCL_TUNER_PLUGIN_SAVE_REQUESTS")
#: The lines of the check's training command that point its tuner's record at $SCRATCH.
CHECK_RECORD_LINES = ("export NCCL_TUNER_TUNING_FILE=$SCRATCH/rccl-tuner/logs/$SLURM_PROCID.csv \n",
                      "mkdir -p $SCRATCH/rccl-tuner/logs \n")
#: The check's GEMM tuning switches: TransformerEngine's online selection.
TE_ONLINE_TUNING = ("TE_HIPBLASLT_TUNING_RUN_COUNT", "TE_HIPBLASLT_TUNING_ALGO_COUNT")
#: The image tuner's recording switch (imagebuild's rccl-tuner-v4.c adapter).
RECORD_VARIABLE = "IMAGEBUILD_TUNER_RECORD"


@rfm.simple_test
class PyTorchMegatronLM_AMD_Optimized_imagebuild(PyTorchMegatronLM_AMD_Optimized,
                                                 ContainerEngineMixin):
    # ReFrame's own variables, set as its checks set them (the _CE class's values)
    valid_systems = ["+amdgpu +ce"]  # noqa: RUF012
    valid_prog_environs = ["builtin"]  # noqa: RUF012
    #: The EDF written by `imagebuild tune edf` (artifacts/<recipe>-tuning.toml: the tuning
    #: bundle mounted and loaded), `imagebuild squash` or `imagebuild render`.
    imagebuild_edf = variable(str)
    tokenizer_model = variable(str, type(None), value=None)
    megatron_lm_dir = variable(str, value="/opt/megatron-lm")
    #: An RCCL tuner configuration outside a bundle (tune rccl's DIR/nccl_tuner.conf), bound
    #: read-only at its own path; None: the EDF's, else the image's own, else none.
    rccl_tuner_config = variable(str, type(None), value=None)
    #: The image's tuner records what RCCL asks it (IMAGEBUILD_TUNER_RECORD) into
    #: tuner_record_dir, as the check's tuner records into $SCRATCH/rccl-tuner/logs.
    tuner_record = variable(typ.Bool, value=True)
    tuner_record_dir = variable(str, value="$SCRATCH/tuner-record")
    #: TransformerEngine's online GEMM selection, the check's gemm_tuning switch from the
    #: command line (-S te_gemm_tuning=false): ReFrame converts a command-line string for a
    #: typ.Bool variable, not for the check's bool, and a variable cannot be declared again.
    te_gemm_tuning = variable(typ.Bool, value=True)

    @run_after("setup")
    def use_the_imagebuild_image(self):
        edf = read_edf(self.imagebuild_edf)
        # The check's own mounts (its _CE class's): the stage directory at its path, the
        # datasets, HF_HOME, the dataset cache and checkpoint directories.
        extra = [*(self.datasets.split(",") if self.datasets else []), self.hf_home,
                 *[d for d in (self.dataset_cache_dir, self.checkpoint_dir) if d]]
        self.container_mounts = [f"{self.stagedir}:{self.stagedir}",
                                 *[f"{d}:{d}" for d in extra]]
        use_edf(self, edf)
        self.env_vars = {key: value for key, value in self.env_vars.items()
                         if not key.startswith(NETWORK_PREFIXES) and key not in CHECK_TUNER}
        if not (self.gemm_tuning and self.te_gemm_tuning):
            for key in TE_ONLINE_TUNING:
                self.env_vars.pop(key, None)
        self.env_vars["MEGATRON_LM_DIR"] = self.megatron_lm_dir
        self.env_vars["PROJECT_DIR"] = "$PWD/logs/Meg-Runs/$PROJECT_NAME"
        if self.rccl_tuner_config:  # in the EDF's [env], over a bundle's
            self.container_mounts.append(f"{self.rccl_tuner_config}:{self.rccl_tuner_config}:ro")
            self.container_env_table["env"]["NCCL_TUNER_CONFIG_FILE"] = self.rccl_tuner_config
        self.prerun_cmds = without_downloads(self.prerun_cmds)
        if self.tuner_record:
            self.env_vars[RECORD_VARIABLE] = self.tuner_record_dir
            self.prerun_cmds.append(f"mkdir -p {self.tuner_record_dir}")
        command = self.executable_opts[-1]
        for line in CHECK_RECORD_LINES:
            if line not in command:
                raise ValueError(f"the check's tuner record lines changed: {line!r} not in "
                                 f"{command!r}")
            command = command.replace(line, "")
        self.executable_opts[-1] = command
        local_tokenizer(self, self.tokenizer_model)
