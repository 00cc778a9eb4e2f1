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
import tomllib

import reframe as rfm
from reframe.core.builtins import run_after, variable

_CHECKS = os.environ.get("CSCS_REFRAME_TESTS")
if not _CHECKS:
    raise ImportError("set CSCS_REFRAME_TESTS to a checkout of eth-cscs/cscs-reframe-tests")
sys.path.insert(0, str(pathlib.Path(_CHECKS) / "checks" / "apps" / "pytorch"))
from pytorch_megatronlm_amd import PyTorchMegatronLM_AMD_CE

#: The check's steps that download: the tokenizer (wget) and Megatron-LM (git clone), each
#: ending with `cd -`.
DOWNLOAD_BLOCKS = ("mkdir -p tokenizer", "git clone ")
#: Llama-2's vocabulary (the check's llama2-7b model).
LLAMA2_VOCAB = 32000


def without_downloads(commands):
    """The check's prerun commands without the two download blocks."""
    kept, skipping, found = [], False, 0
    for command in commands:
        if command.startswith(DOWNLOAD_BLOCKS):
            skipping, found = True, found + 1
        if not skipping:
            kept.append(command)
        elif command == "cd -":
            skipping = False
    if found != len(DOWNLOAD_BLOCKS):
        raise ValueError(f"the check's prerun commands changed: found {found} of "
                         f"{len(DOWNLOAD_BLOCKS)} download blocks in {commands}")
    return kept


#: EDF keys the check's mixin writes itself (container_image, container_mounts, and the
#: workdir it mounts the stage directory at).
MIXIN_KEYS = ("image", "mounts", "workdir")


def toml_value(value):
    """A TOML literal for a scalar the mixin writes as `key = value`, unquoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def top_level(edf):
    """The EDF's other top-level scalars (writable, entrypoint, ...), for the mixin's
    container_env_key_values, which it would otherwise leave out."""
    return {key: toml_value(value) for key, value in edf.items()
            if key not in MIXIN_KEYS and not isinstance(value, (dict, list))}


def dotted(table, prefix=""):
    """A TOML table as the mixin writes tables: one level, dotted keys (com.hooks.cxi.enabled)."""
    flat = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = str(value)
    return flat


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
        with open(self.imagebuild_edf, "rb") as handle:
            edf = tomllib.load(handle)
        # Kept as written: the Container Engine expands ${SCRATCH}, ${PWD}... when the job's
        # container starts, as it does for the EDF itself.
        self.container_image = edf["image"]
        self.container_mounts += list(edf.get("mounts", []))
        self.container_env_key_values = {**self.container_env_key_values, **top_level(edf)}
        self.container_env_table = {"env": dotted(edf.get("env", {})),
                                    "annotations": dotted(edf.get("annotations", {}))}
        self.env_vars["MEGATRON_LM_DIR"] = self.megatron_lm_dir
        self.env_vars["PROJECT_DIR"] = "$PWD/logs/Meg-Runs/$PROJECT_NAME"
        self.prerun_cmds = without_downloads(self.prerun_cmds)
        tokenizer = f"{self.stagedir}/tokenizer/tokenizer.model"
        if self.tokenizer_model:
            self.prerun_cmds.insert(0, f"mkdir -p tokenizer && cp {self.tokenizer_model} "
                                       f"{tokenizer}")
            return
        llama2 = f"--tokenizer-type Llama2Tokenizer --tokenizer-model {tokenizer}"
        null = f"--tokenizer-type NullTokenizer --vocab-size {LLAMA2_VOCAB}"
        command = self.executable_opts[-1]
        if llama2 not in command:
            raise ValueError(f"the check's tokenizer arguments changed: {llama2!r} not in "
                             f"{command!r}")
        self.executable_opts[-1] = command.replace(llama2, null)
