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
MixedPrecisionPolicy, one group per transformer block and one at the root): before a
group's forward (and again in backward) an all-gather of its bf16 parameters; after its
backward a reduce-scatter of its fp32 gradients. The root group holds what no block does:
the embedding, the final norm and the output projection (1,050,677,248 parameters for
Llama-3.1-8B, so a 2.10 GB all-gather and a 4.20 GB reduce-scatter every step). Sizes follow
nccl-tests' convention (the gathered output, the scattered input), i.e. the whole group,
with FSDP2's padding: every parameter is chunked on dim 0 into world-size pieces of
ceil(dim0 / W) rows (torch.chunk; pytorch torch/distributed/fsdp/_fully_shard/
_fsdp_param.py, padded_sharded_param_size, and _fsdp_collectives.py, foreach_reduce with
_get_dim0_padded_size), so on 12 or 24 ranks, which do not divide 4096, 1024 or 14336,
the collectives move more bytes than the parameters hold.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from pathlib import Path

from .llama import LlamaConfig


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


def group_shapes(config: LlamaConfig) -> dict[str, list[tuple[int, ...]]]:
    """The parameter shapes of FSDP2's two kinds of group: one block, and the root."""
    head = config.head_dim
    block = [(config.n_heads * head, config.dim), (config.n_kv_heads * head, config.dim),
             (config.n_kv_heads * head, config.dim), (config.dim, config.n_heads * head),
             (config.ffn_dim, config.dim), (config.ffn_dim, config.dim),
             (config.dim, config.ffn_dim), (config.dim,), (config.dim,)]
    root = [(config.vocab_size, config.dim), (config.dim,), (config.vocab_size, config.dim)]
    return {"block": block, "root": root}


def padded_elements(shapes: list[tuple[int, ...]], world_size: int) -> int:
    """Elements one FSDP2 collective of a group moves on ``world_size`` ranks: each
    parameter's dim 0 rounded up to a multiple of the world size."""
    total = 0
    for shape in shapes:
        rows = -(-shape[0] // world_size) * world_size
        rest = 1
        for extent in shape[1:]:
            rest *= extent
        total += rows * rest
    return total


def fsdp_collectives(config: LlamaConfig, world_size: int, mixed_precision: bool = True,
                     model: str = "Llama-3.1-8B") -> list[CollectiveSize]:
    """FSDP2's collectives for ``config`` on ``world_size`` ranks, per block and at the
    root: with the bf16-param / fp32-reduce policy a bf16 gather and an fp32
    reduce-scatter; without it (CPU) both in float32."""
    gather = ("bfloat16", 2) if mixed_precision else ("float32", 4)
    rows: list[CollectiveSize] = []
    for group, shapes in group_shapes(config).items():
        params = sum(_numel(shape) for shape in shapes)
        elements = padded_elements(shapes, world_size)
        padding = (f", padded to {elements:,} for {world_size} ranks"
                   if elements != params else "")
        what = (f"FSDP2 per block of {model} ({params:,} parameters{padding})" if group == "block"
                else f"FSDP2 root group of {model}: embedding, final norm, output "
                     f"({params:,} parameters{padding})")
        rows += [CollectiveSize("all_gather", elements * gather[1], gather[0],
                                f"{what}: {gather[0]} parameters"),
                 CollectiveSize("reduce_scatter", elements * 4, "float32",
                                f"{what}: float32 gradients")]
    return rows


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for extent in shape:
        count *= extent
    return count


#: Sizes users measured on the cluster in a Megatron-LM Llama-3.1-8B run with the
#: distributed optimizer: a 151,003,136 B all-gather of bf16 parameters and a 302,006,272 B
#: reduce-scatter of the same bucket's gradients. 302,006,272 = 2 x 151,003,136: the same
#: 75,501,568 elements at 4 bytes: with --bf16 Megatron accumulates and reduces gradients
#: in fp32 (megatron/training/arguments.py: an fp32 main_grads_dtype, the default, sets
#: accumulate_allreduce_grads_in_fp32).
MEGATRON_ALL_GATHER = CollectiveSize(
    "all_gather", 151003136, "bfloat16",
    "Megatron-LM Llama-3.1-8B bucket measured on the cluster: bf16 parameters")
MEGATRON_REDUCE_SCATTER = CollectiveSize(
    "reduce_scatter", 302006272, "float32",
    "Megatron-LM Llama-3.1-8B bucket measured on the cluster: fp32 gradients")
MEGATRON_SIZES = (MEGATRON_ALL_GATHER.bytes, MEGATRON_REDUCE_SCATTER.bytes)


def megatron_collectives() -> list[CollectiveSize]:
    return [MEGATRON_ALL_GATHER, MEGATRON_REDUCE_SCATTER]
