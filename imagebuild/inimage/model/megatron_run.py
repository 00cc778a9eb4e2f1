"""The Megatron-LM run of the ``megatron`` check: its ``pretrain_gpt.py`` command line and
what Megatron prints about it.

The arguments follow CSCS's ReFrame check for Megatron-LM on MI300A
(eth-cscs/cscs-reframe-tests, checks/apps/pytorch/pytorch_megatronlm_amd.py) where they
apply: mcore models, TransformerEngine, flash attention, bf16, the distributed optimizer
with overlapped gradient reduce and parameter gather, sequence parallelism when TP > 1,
mock data, the same optimizer settings, ``--log-throughput`` and ``--exit-interval``. They
differ where that check would not measure the model it names or cannot run here:

- Llama-3.1-8B's dimensions (the FSDP2 train step's model): SwiGLU (the ReFrame check
  declares swiglu but never passes ``--swiglu``, so it trains GeLU), RoPE base 500000,
  RMSNorm eps 1e-5, 8 KV groups, vocabulary 128256;
- Megatron's NullTokenizer with the Llama-3 vocabulary size unless a tokenizer model is
  mounted (nothing is downloaded at run time);
- no checkpoint save/load (a validation writes nothing to shared storage), and flags that
  later Megatron releases removed (``--no-async-tensor-model-parallel-allreduce``,
  ``--use-contiguous-parameters-in-local-ddp``) are left out so that any fork parses them.

Standard library only: the CPU probe and the GPU check both build on it.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

#: Environment of every Megatron rank, as the ReFrame check sets it: Megatron refuses
#: overlapped TP communication without one hardware queue per stream
#: (validate_args: "Using async gradient all reduce requires ... CUDA_DEVICE_MAX_CONNECTIONS").
MEGATRON_ENV = {
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "GPU_MAX_HW_QUEUES": "2",
    "TORCH_NCCL_HIGH_PRIORITY": "1",
}
#: The ReFrame check's FP8 variant (TransformerEngine's delayed-scaling hybrid format).
FP8_ARGUMENTS = ("--fp8-format", "hybrid", "--fp8-margin", "0", "--fp8-interval", "1",
                 "--fp8-amax-history-len", "1024", "--fp8-amax-compute-algo", "max",
                 "--attention-softmax-in-fp32")
#: The local (torch) layers without TransformerEngine's or Apex's fused kernels: Megatron's
#: fused RoPE is theirs (TransformerConfig: "apply_rope_fusion is not available") and
#: torch's norm refuses persist_layer_norm (torch_norm.WrappedTorchNorm asserts it off).
LOCAL_ADDED = ("--no-rope-fusion", "--no-persist-layer-norm")
#: Recompute settings for the train planner's activation checkpointing modes: "selective"
#: (every other block in the FSDP2 step) recomputes the first half of the blocks.
RECOMPUTE = {"none": (), "full": ("--recompute-granularity", "full", "--recompute-method",
                                  "uniform", "--recompute-num-layers", "1")}


@dataclass(frozen=True)
class Architecture:
    layers: int
    hidden: int
    ffn_hidden: int
    heads: int
    kv_groups: int
    vocab: int
    rope_base: float
    norm_eps: float


@dataclass(frozen=True)
class MegatronRun:
    """One ``pretrain_gpt.py`` run: model, parallelism, batch, precision, length."""

    model: Architecture
    seq: int
    world_size: int
    tensor_parallel: int = 1
    micro_batch: int = 1
    iterations: int = 13
    precision: str = "bf16"  # or "fp8" (TransformerEngine hybrid; always bf16 underneath)
    activation_checkpointing: str = "none"
    tokenizer_model: str | None = None
    #: "transformer_engine" (the ReFrame check's, Megatron's default) or "local" (torch
    #: layers: a run without TransformerEngine, labelled as such).
    transformer_impl: str = "transformer_engine"

    @property
    def data_parallel(self) -> int:
        return self.world_size // self.tensor_parallel

    @property
    def global_batch(self) -> int:
        """One micro-batch per data-parallel rank per step, like the FSDP2 step."""
        return self.micro_batch * self.data_parallel

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(data_parallel=self.data_parallel, global_batch=self.global_batch)
        return data


def pretrain_arguments(run: MegatronRun) -> list[str]:
    """The ``pretrain_gpt.py`` arguments of ``run`` (GPU: TransformerEngine, bf16, NCCL)."""
    m = run.model
    if run.world_size % run.tensor_parallel:
        raise ValueError(f"tensor parallel size {run.tensor_parallel} does not divide "
                         f"{run.world_size} ranks")
    args = [
        "--tensor-model-parallel-size", str(run.tensor_parallel),
        "--pipeline-model-parallel-size", "1", "--context-parallel-size", "1",
        "--use-mcore-models", "--transformer-impl", run.transformer_impl, "--use-flash-attn",
        "--num-layers", str(m.layers), "--hidden-size", str(m.hidden),
        "--ffn-hidden-size", str(m.ffn_hidden), "--num-attention-heads", str(m.heads),
        "--group-query-attention", "--num-query-groups", str(m.kv_groups),
        "--seq-length", str(run.seq), "--max-position-embeddings", str(run.seq),
        "--position-embedding-type", "rope", "--rotary-base", f"{m.rope_base:g}",
        "--swiglu", "--normalization", "RMSNorm", "--norm-epsilon", f"{m.norm_eps:g}",
        "--untie-embeddings-and-output-weights", "--disable-bias-linear",
        "--attention-dropout", "0.0", "--hidden-dropout", "0.0",
        "--no-gradient-accumulation-fusion", "--no-masked-softmax-fusion",
        "--micro-batch-size", str(run.micro_batch), "--global-batch-size", str(run.global_batch),
        "--train-iters", str(run.iterations), "--exit-interval", str(run.iterations),
        "--eval-iters", "1", "--eval-interval", str(run.iterations + 1),
        "--optimizer", "adam", "--lr", "1.0e-4", "--min-lr", "1.0e-5",
        "--lr-decay-style", "cosine", "--lr-warmup-iters", "1", "--weight-decay", "0.1",
        "--clip-grad", "1.0", "--adam-beta1", "0.9", "--adam-beta2", "0.95",
        "--init-method-std", "0.02",
        "--bf16", "--use-distributed-optimizer", "--overlap-grad-reduce",
        "--overlap-param-gather", "--distributed-backend", "nccl",
        "--distributed-timeout-minutes", "30",
        "--mock-data", "--split", "99990,8,2", "--dataloader-type", "cyclic",
        "--num-workers", "1",
        "--log-interval", "1", "--log-throughput",
    ]
    if run.tokenizer_model:
        args += ["--tokenizer-type", "Llama2Tokenizer", "--tokenizer-model", run.tokenizer_model]
    else:
        args += ["--tokenizer-type", "NullTokenizer", "--vocab-size", str(m.vocab)]
    if run.tensor_parallel > 1:
        args.append("--sequence-parallel")
    if run.transformer_impl == "local":
        args += LOCAL_ADDED
    if run.precision == "fp8":
        args += FP8_ARGUMENTS
    elif run.precision != "bf16":
        raise ValueError(f"precision {run.precision!r}: bf16 or fp8")
    if run.activation_checkpointing == "selective":
        args += ["--recompute-granularity", "full", "--recompute-method", "block",
                 "--recompute-num-layers", str(m.layers // 2)]
    else:
        args += RECOMPUTE[run.activation_checkpointing]
    return args


#: What a CPU can run of the same model: Megatron's local (torch) layers in float32 over
#: gloo, without the fused kernels that need TransformerEngine, Apex or a GPU.
CPU_REPLACEMENTS = {"--transformer-impl": "local", "--distributed-backend": "gloo"}
CPU_DROPPED = ("--bf16", "--use-flash-attn", "--overlap-grad-reduce", "--overlap-param-gather")
CPU_ADDED = ("--use-cpu-initialization", "--no-rope-fusion", "--no-persist-layer-norm",
             "--no-bias-swiglu-fusion")


def cpu_arguments(gpu_args: list[str]) -> list[str]:
    """The GPU argument list with the substitutions a CPU needs (for the CPU probe)."""
    out: list[str] = []
    items = iter(gpu_args)
    for item in items:
        if item in CPU_REPLACEMENTS:
            next(items)
            out += [item, CPU_REPLACEMENTS[item]]
        elif item not in CPU_DROPPED:
            out.append(item)
    return out + [flag for flag in CPU_ADDED if flag not in out]


# --- Megatron's output ----------------------------------------------------------------------

#: megatron/training/training.py training_log (NVIDIA core_v0.12 to today, ROCm and Swiss AI
#: forks): ' iteration {:8d}/{:8d} |', ' elapsed time per iteration (ms): {:.1f} |',
#: ' throughput per GPU (TFLOP/s/GPU): {throughput:.1f} |' (with --log-throughput) and
#: ' lm loss: {:.6E} |', all on one line printed by the last rank.
ITERATION = re.compile(r"\biteration\s+(\d+)/\s*(\d+)\s*\|")
#: printed by rank 0 when --exit-interval divides the iteration (checkpoint_and_decide_exit);
#: the ReFrame check's sanity pattern.
EXITED = re.compile(r"\[exiting program at iteration (\d+)\]")
THROUGHPUT = "throughput per GPU (TFLOP/s/GPU)"
ELAPSED = "elapsed time per iteration (ms)"
LOSS = "lm loss"


@dataclass
class TrainingLog:
    iterations: list[dict[str, float]] = field(default_factory=list)
    exited_at: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_training_log(text: str) -> TrainingLog:
    """Every iteration line's fields (iteration, elapsed ms, TFLOP/s/GPU, lm loss, ...) and
    the iteration Megatron said it exited at."""
    log = TrainingLog()
    for line in text.splitlines():
        found = ITERATION.search(line)
        if found:
            entry: dict[str, float] = {"iteration": int(found.group(1)),
                                       "train_iters": int(found.group(2))}
            for part in line[found.end():].split("|"):
                name, colon, value = part.rpartition(":")
                try:
                    if colon:
                        entry[name.strip()] = float(value)
                except ValueError:  # a field that is not a number
                    continue
            log.iterations.append(entry)
        exited = EXITED.search(line)
        if exited:
            log.exited_at = int(exited.group(1))
    return log


def figures_of(log: TrainingLog, run: MegatronRun, warmup: int) -> dict[str, Any]:
    """The run's figures from Megatron's own numbers, iterations after ``warmup`` only.

    tokens/s/GPU is not printed by Megatron: it is global batch x sequence / (elapsed time
    per iteration x ranks), from Megatron's elapsed time.
    """
    timed = [e for e in log.iterations if e["iteration"] > warmup]
    if not timed:
        raise ValueError(f"no iteration after the {warmup} warm-up iterations in Megatron's "
                         "output")
    elapsed = [e[ELAPSED] / 1e3 for e in timed if ELAPSED in e]
    throughput = [e[THROUGHPUT] for e in timed if THROUGHPUT in e]
    losses = [e[LOSS] for e in log.iterations if LOSS in e]
    median = statistics.median(elapsed) if elapsed else None
    return {
        "iterations_timed": len(timed),
        "warmup_iterations": warmup,
        "elapsed_s_per_iteration_median": median,
        "tflops_per_gpu": statistics.fmean(throughput) if throughput else None,
        "tflops_per_gpu_all_iterations": (statistics.fmean(
            [e[THROUGHPUT] for e in log.iterations if THROUGHPUT in e]) if throughput else None),
        "tokens_per_s_per_gpu": (run.global_batch * run.seq / (median * run.world_size)
                                 if median else None),
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "losses": losses,
        "exited_at_iteration": log.exited_at,
    }
