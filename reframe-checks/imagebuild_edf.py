# What the wrappers of CSCS's Megatron-LM checks share (not a check): the EDF imagebuild
# wrote, handed to the checks' Container Engine mixin (eth-cscs/cscs-reframe-tests,
# checks/mixins/container_engine.py), and the changes that keep the checks from downloading.
#
# The mixin writes the job's EDF itself: `image`, `mounts` (the stage directory first) and
# `workdir`, then `container_env_key_values` as `key = value` lines and each table of
# `container_env_table` as `[name]` with `key = "value"` lines.

import tomllib

#: The checks' steps that download: the tokenizer (wget) and Megatron-LM (git clone), each
#: ending with `cd -`.
DOWNLOAD_BLOCKS = ("mkdir -p tokenizer", "git clone ")
#: Llama-2's vocabulary (the checks' Llama2Tokenizer).
LLAMA2_VOCAB = 32000
#: EDF keys the mixin writes itself (container_image, container_mounts, and the workdir it
#: mounts the stage directory at).
MIXIN_KEYS = ("image", "mounts", "workdir")


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


def read_edf(path):
    with open(path, "rb") as handle:
        return tomllib.load(handle)


def use_edf(test, edf):
    """The EDF's image, mounts, other top-level keys, [env] and [annotations] on the
    mixin's variables. Kept as written: the Container Engine expands ${SCRATCH}, ${PWD}...
    when the job's container starts, as it does for the EDF itself."""
    test.container_image = edf["image"]
    test.container_mounts += list(edf.get("mounts", []))
    test.container_env_key_values = {**test.container_env_key_values, **top_level(edf)}
    test.container_env_table = {"env": dotted(edf.get("env", {})),
                                "annotations": dotted(edf.get("annotations", {}))}


def local_tokenizer(test, tokenizer_model):
    """Nothing downloaded: a tokenizer.model copied into the stage directory, else
    Megatron's NullTokenizer with the vocabulary size of the checks' Llama2Tokenizer."""
    tokenizer = f"{test.stagedir}/tokenizer/tokenizer.model"
    if tokenizer_model:
        test.prerun_cmds.insert(0, f"mkdir -p tokenizer && cp {tokenizer_model} {tokenizer}")
        return
    llama2 = f"--tokenizer-type Llama2Tokenizer --tokenizer-model {tokenizer}"
    null = f"--tokenizer-type NullTokenizer --vocab-size {LLAMA2_VOCAB}"
    command = test.executable_opts[-1]
    if llama2 not in command:
        raise ValueError(f"the check's tokenizer arguments changed: {llama2!r} not in "
                         f"{command!r}")
    test.executable_opts[-1] = command.replace(llama2, null)
