# CSCS's Megatron-LM check run on an imagebuild image, with the image's own Megatron-LM.
#
# The check (eth-cscs/cscs-reframe-tests, checks/apps/pytorch/pytorch_megatronlm_amd.py,
# class PyTorchMegatronLM_AMD_CE) is used as it is, through a subclass; what changes:
# - the image and its Container Engine settings come from the EDF `imagebuild squash` wrote
#   beside the squashfs (image, mounts, its other top-level keys such as `writable = true`,
#   [env], [annotations]: the site's hooks, e.g. no ROCm 6 aws_ofi_nccl hook on a ROCm 7
#   image, whose own RCCL network plugin is used); the check's workdir stays its own;
# - Megatron-LM is the image's copy at /opt/megatron-lm (MEGATRON_LM_DIR), dataset helpers
#   built, instead of a run-time git clone; its logs and checkpoints go to the stage
#   directory (the image is read-only);
# - nothing is downloaded: the tokenizer is a file you name (-S tokenizer_model=...), else
#   Megatron's NullTokenizer with the Llama-2 vocabulary size the check's model uses.
#
# Python >= 3.11 (the EDF is read with tomllib; ReFrame 4.10 itself takes 3.10):
#   export CSCS_REFRAME_TESTS=/path/to/cscs-reframe-tests
#   reframe -C $CSCS_REFRAME_TESTS/config/cscs.py -c reframe-checks/imagebuild_megatronlm.py \
#       -n PyTorchMegatronLM_AMD_imagebuild -S imagebuild_edf=$PWD/artifacts/rocm-7.1.1.toml -r
#
# Every other variable of the check (-S default_num_nodes=..., enable_fp8=true, ...) works
# as it does for rocm/megatron-lm. The check runs Megatron with TransformerEngine (its
# default --transformer-impl), so the image needs TransformerEngine.

import os
import pathlib
import sys

import reframe as rfm
from reframe.core.builtins import run_after, variable

_CHECKS = os.environ.get("CSCS_REFRAME_TESTS")
if not _CHECKS:
    raise ImportError("set CSCS_REFRAME_TESTS to a checkout of eth-cscs/cscs-reframe-tests")
sys.path.insert(0, str(pathlib.Path(_CHECKS) / "checks" / "apps" / "pytorch"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from imagebuild_edf import local_tokenizer, read_edf, use_edf, without_downloads
from pytorch_megatronlm_amd import PyTorchMegatronLM_AMD_CE


@rfm.simple_test
class PyTorchMegatronLM_AMD_imagebuild(PyTorchMegatronLM_AMD_CE):
    #: The EDF written by `imagebuild squash` (artifacts/<recipe>.toml) or `imagebuild
    #: render` (envs/<recipe>.toml): its image, mounts, [env] and [annotations] are used.
    imagebuild_edf = variable(str)
    #: A SentencePiece tokenizer.model to copy into the stage directory (Llama2Tokenizer, as
    #: the check uses); None: Megatron's NullTokenizer.
    tokenizer_model = variable(str, type(None), value=None)
    megatron_lm_dir = variable(str, value="/opt/megatron-lm")

    @run_after("setup")
    def use_the_imagebuild_image(self):
        use_edf(self, read_edf(self.imagebuild_edf))
        self.env_vars["MEGATRON_LM_DIR"] = self.megatron_lm_dir
        self.env_vars["PROJECT_DIR"] = "$PWD/logs/Meg-Runs/$PROJECT_NAME"
        self.prerun_cmds = without_downloads(self.prerun_cmds)
        local_tokenizer(self, self.tokenizer_model)
