"""The megatron check's command line and its reading of Megatron's output.

The output formats are taken from Megatron-LM's own source in ../shared/fixtures/sources (the
Swiss AI fork and ROCm's port): a line is formatted with the format strings found there, so
a Megatron that renamed or reformatted a field fails these tests."""

from __future__ import annotations

import re
import subprocess
from itertools import pairwise

import pytest

from imagebuild.inimage.checks.megatron import architecture
from imagebuild.inimage.model.llama import LLAMA_3_1_8B
from imagebuild.inimage.model.megatron_run import (
    ELAPSED,
    LOSS,
    THROUGHPUT,
    MegatronRun,
    cpu_arguments,
    figures_of,
    parse_training_log,
    pretrain_arguments,
)
from testbed.source_mirror import fixtures_dir

BUNDLES = {"swiss-ai": ("megatron-lm-swiss-ai.bundle", "main"),
           "rocm": ("megatron-lm-rocm.bundle", "rocm_dev")}


@pytest.fixture(scope="module", params=sorted(BUNDLES))
def megatron_source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                    ) -> dict[str, str]:
    bundle, ref = BUNDLES[request.param]
    bare = tmp_path_factory.mktemp(request.param) / "megatron.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(fixtures_dir() / bundle), str(bare)],
                   check=True)

    def show(path: str) -> str:
        return subprocess.run(["git", "--git-dir", str(bare), "show", f"{ref}:{path}"],
                              check=True, capture_output=True, text=True).stdout

    return {"training": show("megatron/training/training.py"),
            "pretrain_gpt": show("pretrain_gpt.py"),
            "arguments": show("megatron/training/arguments.py")}


def _field_format(source: str, name: str) -> str:
    """The format spec Megatron prints ``name`` with (e.g. ``{:.1f}``)."""
    found = re.search(r"' " + re.escape(name) + r": (\{[^}]*\}) \|'", source)
    assert found, f"Megatron's training_log no longer prints {name!r}"
    return found.group(1)


def _run(**changes: object) -> MegatronRun:
    return MegatronRun(model=architecture(LLAMA_3_1_8B), seq=8192, world_size=8, **changes)


def test_megatrons_own_log_line_is_read_back(megatron_source: dict[str, str]) -> None:
    training = megatron_source["training"]
    assert "' iteration {:8d}/{:8d} |'" in training
    assert "'lm loss'" in megatron_source["pretrain_gpt"]
    loss_format = re.search(r"' \{\}: (\{:[^}]*\}) \|'\.format\(key", training)
    assert loss_format, "Megatron no longer prints the losses as ' {}: {:.6E} |'"
    lines = []
    for iteration, (ms, tflops, loss) in enumerate(
            [(2100.0, 150.2, 11.9), (1000.0, 310.4, 11.5), (1002.0, 309.8, 11.1),
             (998.0, 311.0, 10.8)], start=1):
        # Megatron's own format specs: ' iteration {:8d}/{:8d} |', ' consumed samples: {:12d} |'
        line = f" [2026-11-26 01:00:00] iteration {iteration:8d}/{4:8d} |"
        line += f" consumed samples: {iteration * 8:12d} |"
        line += f" {ELAPSED}: " + _field_format(training, ELAPSED).format(ms) + " |"
        line += f" {THROUGHPUT}: " + _field_format(training, THROUGHPUT).replace(
            "throughput", "").format(tflops) + " |"
        line += " learning rate: 1.000000E-04 |"
        line += f" {LOSS}: {loss_format.group(1).format(loss)} |"
        lines.append(line)
    exit_line = re.search(r"exiting program at iteration \{(iteration)?\}", training)
    assert exit_line, "Megatron no longer prints 'exiting program at iteration N'"
    lines.append("[exiting program at iteration 4] datetime: 2026-11-26 01:00:05 ")
    log = parse_training_log("\n".join(lines))
    assert [e["iteration"] for e in log.iterations] == [1, 2, 3, 4]
    assert log.iterations[1][ELAPSED] == 1000.0
    assert log.iterations[1][THROUGHPUT] == pytest.approx(310.4)
    assert log.iterations[3][LOSS] == pytest.approx(10.8)
    assert log.exited_at == 4
    figures = figures_of(log, _run(iterations=4), warmup=1)
    assert figures["iterations_timed"] == 3
    assert figures["elapsed_s_per_iteration_median"] == pytest.approx(1.0)
    assert figures["tflops_per_gpu"] == pytest.approx((310.4 + 309.8 + 311.0) / 3)
    # global batch 8 (one micro-batch per rank) x 8192 tokens / (1 s x 8 ranks)
    assert figures["tokens_per_s_per_gpu"] == pytest.approx(8192)
    assert (figures["loss_first"], figures["loss_last"]) == (11.9, 10.8)


def test_nothing_after_the_warm_up_is_an_error() -> None:
    log = parse_training_log(" iteration        1/       1 | lm loss: 1.0E+01 |")
    with pytest.raises(ValueError, match="warm-up"):
        figures_of(log, _run(iterations=1), warmup=1)


def test_the_arguments_follow_the_reframe_check_where_they_apply() -> None:
    args = pretrain_arguments(_run(iterations=13))
    for flag in ("--use-mcore-models", "--use-flash-attn", "--bf16", "--use-distributed-optimizer",
                 "--overlap-grad-reduce", "--overlap-param-gather", "--mock-data",
                 "--log-throughput", "--swiglu", "--group-query-attention"):
        assert flag in args
    value = dict(pairwise(args))
    assert value["--transformer-impl"] == "transformer_engine"
    assert value["--exit-interval"] == value["--train-iters"] == "13"
    assert value["--global-batch-size"] == "8" and value["--micro-batch-size"] == "1"
    assert (value["--hidden-size"], value["--ffn-hidden-size"], value["--num-query-groups"]) == (
        "4096", "14336", "8")
    assert value["--tokenizer-type"] == "NullTokenizer" and value["--vocab-size"] == "128256"
    assert "--sequence-parallel" not in args and "--fp8-format" not in args


def test_tensor_parallelism_brings_sequence_parallelism_and_fewer_data_ranks() -> None:
    args = pretrain_arguments(_run(tensor_parallel=4))
    value = dict(pairwise(args))
    assert "--sequence-parallel" in args
    assert value["--global-batch-size"] == "2"
    with pytest.raises(ValueError, match="does not divide"):
        pretrain_arguments(_run(tensor_parallel=3))


def test_fp8_is_the_reframe_checks_hybrid_variant() -> None:
    args = pretrain_arguments(_run(precision="fp8"))
    assert args[args.index("--fp8-format") + 1] == "hybrid"
    assert args[args.index("--fp8-amax-history-len") + 1] == "1024"
    assert "--bf16" in args  # FP8 GEMMs in a bf16 model, as the ReFrame check runs it


def test_a_mounted_tokenizer_replaces_the_null_tokenizer() -> None:
    args = pretrain_arguments(_run(tokenizer_model="/t/tokenizer.model"))
    assert args[args.index("--tokenizer-type") + 1] == "Llama2Tokenizer"
    assert args[args.index("--tokenizer-model") + 1] == "/t/tokenizer.model"
    assert "--vocab-size" not in args


def test_the_cpu_list_swaps_only_what_a_cpu_cannot_run() -> None:
    gpu = pretrain_arguments(_run())
    cpu = cpu_arguments(gpu)
    value = dict(pairwise(cpu))
    assert value["--transformer-impl"] == "local" and value["--distributed-backend"] == "gloo"
    assert "--bf16" not in cpu and "--use-cpu-initialization" in cpu
    assert value["--hidden-size"] == "4096" and value["--num-layers"] == "32"


def test_the_local_layers_run_without_transformerengines_fused_rope(
        megatron_source: dict[str, str]) -> None:
    # Newer Megatron (the Swiss AI fork) refuses apply_rope_fusion without TransformerEngine
    # or Apex; every fork turns it off with --no-rope-fusion (store_false, apply_rope_fusion).
    # Likewise torch's norm (Megatron's fallback without Apex) asserts persist_layer_norm off.
    for flag, definition in (
            ("--no-rope-fusion", r"action='store_false',[^)]*dest='apply_rope_fusion'"),
            ("--no-persist-layer-norm", r"action='store_true'")):
        assert re.search(rf"'{flag}', {definition}", megatron_source["arguments"]), flag
        assert flag in pretrain_arguments(_run(transformer_impl="local"))
        assert flag not in pretrain_arguments(_run())
        cpu = cpu_arguments(pretrain_arguments(_run(transformer_impl="local")))
        assert cpu.count(flag) == 1
