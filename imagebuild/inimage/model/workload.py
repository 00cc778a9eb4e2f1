"""What one Llama training step asks of the GEMM library and the network, from its config.

One place derives the matrix products and the collective sizes of a training step, so the
gemm and collectives checks measure what the train check runs, and a tuning tool can
import the same list (``gemm_problems``) instead of keeping its own.

GEMMs, per nn.Linear with input x (T x in) and weight W (out x in), T tokens per step
(sequence x micro-batch), in PyTorch's row-major terms C(M x N) = op(A) @ op(B):
    forward        y  = x  @ W.T    M=T,   N=out, K=in,  A as stored, B transposed
    grad of input  dx = dy @ W      M=T,   N=in,  K=out, neither transposed
    grad of weight dW = dy.T @ x    M=out, N=in,  K=T,   A transposed, B as stored
A recomputed (activation-checkpointed) block runs its forward products once more.

hipBLASLt and rocBLAS are column-major: the same product is C.T(N x M) = op(B).T @ op(A).T,
so their (m, n, k, transA, transB) is this (N, M, K, transB, transA). ``--gemm-problems
FILE`` reads a CSV in those column-major terms (hipblaslt-bench's and its logs' columns)
and converts it back here.

Collectives of FSDP2 (torch.distributed.fsdp.fully_shard with a bf16 param / fp32 reduce
MixedPrecisionPolicy, one group per transformer block): before a block's forward (and again
in backward) an all-gather of its bf16 parameters; after its backward a reduce-scatter of
its fp32 gradients. Sizes follow nccl-tests' convention (the gathered output, the scattered
input), i.e. the whole block.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from pathlib import Path

from .llama import LlamaConfig, parameter_counts


@dataclass(frozen=True)
class GemmProblem:
    """C(m x n) = op(A)(m x k) @ op(B)(k x n), row-major (PyTorch) terms."""

    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    count: int  # how many times one training step runs it (per rank)
    source: str  # which layer and pass

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def hipblaslt_terms(self) -> dict[str, object]:
        """The same product in column-major (hipBLASLt/rocBLAS) terms."""
        return {"m": self.n, "n": self.m, "k": self.k, "transA": "T" if self.trans_b else "N",
                "transB": "T" if self.trans_a else "N"}

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def linear_layers(config: LlamaConfig) -> list[tuple[str, int, int, int]]:
    """(name, in_features, out_features, count per block) of each block's nn.Linear."""
    kv = config.n_kv_heads * config.head_dim
    return [("attention.wq", config.dim, config.n_heads * config.head_dim, 1),
            ("attention.wk", config.dim, kv, 1),
            ("attention.wv", config.dim, kv, 1),
            ("attention.wo", config.n_heads * config.head_dim, config.dim, 1),
            ("feed_forward.w1", config.dim, config.ffn_dim, 1),
            ("feed_forward.w3", config.dim, config.ffn_dim, 1),
            ("feed_forward.w2", config.ffn_dim, config.dim, 1)]


def gemm_problems(config: LlamaConfig, tokens: int,
                  recomputed_layers: int = 0) -> list[GemmProblem]:
    """The bf16 GEMMs of one training step of ``config`` over ``tokens`` tokens per rank.

    Linears of identical shape and pass are merged (their counts add); ``recomputed_layers``
    blocks run their forward products twice (activation checkpointing).
    """
    merged: dict[tuple[int, int, int, bool, bool], list] = {}

    def add(m: int, n: int, k: int, ta: bool, tb: bool, count: int, source: str) -> None:
        entry = merged.setdefault((m, n, k, ta, tb), [0, []])
        entry[0] += count
        if source not in entry[1]:
            entry[1].append(source)

    layers = config.n_layers
    linears = [(name, i, o, c * layers) for name, i, o, c in linear_layers(config)]
    linears.append(("output", config.dim, config.vocab_size, 1))
    for name, fan_in, fan_out, count in linears:
        recompute = recomputed_layers * count // layers if name != "output" else 0
        add(tokens, fan_out, fan_in, False, True, count + recompute, f"{name} forward")
        add(tokens, fan_in, fan_out, False, False, count, f"{name} grad input")
        add(fan_out, fan_in, tokens, True, False, count, f"{name} grad weight")
    return [GemmProblem(m, n, k, ta, tb, count, ", ".join(sources))
            for (m, n, k, ta, tb), (count, sources) in merged.items()]


def _flag(text: str, where: str) -> bool:
    value = text.strip().upper()
    if value in ("T", "1", "TRUE", "C"):
        return True
    if value in ("N", "0", "FALSE"):
        return False
    raise ValueError(f"{where}: expected N or T, got {text!r}")


def read_gemm_problems(path: str | Path) -> list[GemmProblem]:
    """Problems from a CSV with columns m,n,k,transA,transB in hipBLASLt's column-major
    terms (further columns such as batch_count or count are optional; others ignored)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read GEMM problems ({exc.strerror})") from exc
    rows = list(csv.DictReader(line for line in text.splitlines() if line.strip()))
    if not rows:
        raise ValueError(f"{path}: no GEMM problems (expected a header m,n,k,transA,transB)")
    problems: list[GemmProblem] = []
    for number, row in enumerate(rows, start=2):
        row = {(key or "").strip(): (value or "").strip() for key, value in row.items()}
        where = f"{path}:{number}"
        missing = [key for key in ("m", "n", "k", "transA", "transB") if not row.get(key)]
        if missing:
            raise ValueError(f"{where}: missing {', '.join(missing)} (columns m,n,k,transA,"
                             "transB in hipBLASLt column-major terms)")
        try:
            m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
            count = int(row.get("count") or 1) * int(row.get("batch_count") or 1)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        if min(m, n, k, count) < 1:
            raise ValueError(f"{where}: sizes and counts must be positive")
        # column-major (m, n, k, transA, transB) -> row-major (n, m, k, transB, transA)
        problems.append(GemmProblem(n, m, k, _flag(row["transB"], where),
                                    _flag(row["transA"], where), count, f"{path.name}:{number}"))
    return problems


@dataclass(frozen=True)
class CollectiveSize:
    op: str  # all_reduce, all_gather or reduce_scatter
    bytes: int
    dtype: str  # "bfloat16" or "float32"
    source: str


def fsdp_collectives(config: LlamaConfig, mixed_precision: bool = True,
                     model: str = "Llama-3.1-8B") -> list[CollectiveSize]:
    """FSDP2's per-block collectives for ``config``: with the bf16-param / fp32-reduce
    policy a bf16 gather and an fp32 reduce-scatter; without it (CPU) both in float32."""
    block = parameter_counts(config)["per_layer"]
    gather = ("bfloat16", 2) if mixed_precision else ("float32", 4)
    what = f"FSDP2 per block of {model} ({block:,} parameters)"
    return [CollectiveSize("all_gather", block * gather[1], gather[0],
                           f"{what}: {gather[0]} parameters"),
            CollectiveSize("reduce_scatter", block * 4, "float32", f"{what}: float32 gradients")]


#: Sizes users measured on the cluster in a Megatron-LM Llama-3.1-8B run (its all-gather
#: and reduce-scatter buckets), kept so results compare with those measurements.
MEGATRON_SIZES = (151003136, 302006272)


def megatron_collectives() -> list[CollectiveSize]:
    return [CollectiveSize(op, size, "bfloat16",
                           "Megatron-LM Llama-3.1-8B bucket measured on the cluster")
            for size in MEGATRON_SIZES for op in ("all_gather", "reduce_scatter")]
