"""PyTorch GEMM ops (as a profiler records them) -> hipBLASLt problems.

Row-major ``out[M, N] = mat1[M, K] @ mat2[K, N]`` runs as the column-major
``out^T = mat2^T @ mat1^T`` (aten/src/ATen/native/cuda/Blas.cpp), so hipBLASLt sees
A = mat2, B = mat1, m = N, n = M, k = K. A row-contiguous operand (last stride 1) is read as
is (``N``); a transposed view (first stride 1, e.g. ``W.t()``) is read transposed (``T``).

With "Input Strides" in the trace (torch records them with ``record_shapes`` since 2.x) the
rule is exact. Without them, transposes follow nn.Linear's autograd (torch's
``mm_mat1_backward``/``mm_mat2_backward``): forward ``x @ W.t()`` is TN, the input gradient
``dY @ W`` is NN, the weight gradient ``(dY.t() @ x).t()`` is NT. Weights are recognised by
the shapes aten::linear records as its second input; any other GEMM is taken as NN and
marked "assumed". That fallback is wrong for a GEMM on a transposed view that is not a
linear layer's weight, and when a weight's shape equals an activation's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .problems import HIPBLASLT_TYPES, GemmProblem, compute_type_for

#: Ops that are one BLAS call each (their children, if any, are not GEMMs).
LEAF_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
              "aten::_addmm_activation")


@dataclass(frozen=True)
class RecordedOp:
    name: str
    dims: tuple[tuple[int, ...], ...]
    strides: tuple[tuple[int, ...], ...] | None
    types: tuple[str, ...]
    in_backward: bool = False
    under_linear: bool = False


def operand_positions(name: str) -> tuple[int, int]:
    """Indices of (mat1, mat2) among the op's inputs: addmm/baddbmm take the bias first."""
    return (1, 2) if name in ("aten::addmm", "aten::baddbmm", "aten::_addmm_activation") \
        else (0, 1)


def layout(shape: tuple[int, ...], strides: tuple[int, ...] | None) -> str | None:
    """'N' row-contiguous, 'T' a transposed view, None unknown; BLAS gets copies of others,
    which are contiguous, hence 'N'."""
    if strides is None or len(strides) < 2:
        return None
    rows, cols = shape[-2], shape[-1]
    row_stride, col_stride = strides[-2], strides[-1]
    if col_stride == 1 and (row_stride >= cols or rows == 1):
        return "N"
    if row_stride == 1 and (col_stride >= rows or cols == 1) and col_stride > 0:
        return "T"
    return "N"


def to_problem(op: RecordedOp, weight_shapes: frozenset[tuple[int, int]]) \
        -> tuple[GemmProblem, bool] | None:
    """(problem, transposes assumed?) for one leaf GEMM op; None for anything else."""
    if op.name not in LEAF_GEMMS:
        return None
    first, second = operand_positions(op.name)
    if len(op.dims) <= second or len(op.dims[first]) < 2 or len(op.dims[second]) < 2:
        return None
    mat1, mat2 = op.dims[first], op.dims[second]
    batch = mat1[0] if op.name in ("aten::bmm", "aten::baddbmm") else 1
    M, K, N = mat1[-2], mat1[-1], mat2[-1]
    data_type = HIPBLASLT_TYPES.get(op.types[first] if len(op.types) > first else "", "")
    if not data_type:
        return None
    strides = op.strides
    trans_mat1 = layout(mat1, strides[first]) if strides and len(strides) > second else None
    trans_mat2 = layout(mat2, strides[second]) if strides and len(strides) > second else None
    assumed = False
    if trans_mat1 is None or trans_mat2 is None:
        assumed = True
        trans_mat1, trans_mat2 = _semantic_layout(op, mat1, mat2, weight_shapes)
    problem = GemmProblem(m=N, n=M, k=K, batch_count=batch, trans_a=trans_mat2,
                          trans_b=trans_mat1, a_type=data_type, b_type=data_type,
                          c_type=data_type, d_type=data_type,
                          compute_type=compute_type_for(data_type))
    return problem, assumed and not _semantic_known(op, mat1, mat2, weight_shapes)


def _semantic_layout(op: RecordedOp, mat1: tuple[int, ...], mat2: tuple[int, ...],
                     weights: frozenset[tuple[int, int]]) -> tuple[str, str]:
    """(mat1, mat2) layouts from nn.Linear's semantics (see the module docstring)."""
    transposed_weight = (mat2[-1], mat2[-2]) in weights
    if op.under_linear or (not op.in_backward and transposed_weight):
        return "N", "T"  # x @ W.t()
    if op.in_backward and (mat1[-2], mat2[-1]) in weights:
        return "T", "N"  # dW = dY.t() @ x
    return "N", "N"  # dX = dY @ W, or any other GEMM (assumed contiguous)


def _semantic_known(op: RecordedOp, mat1: tuple[int, ...], mat2: tuple[int, ...],
                    weights: frozenset[tuple[int, int]]) -> bool:
    if op.under_linear:
        return True
    if not op.in_backward:
        return (mat2[-1], mat2[-2]) in weights
    return (mat1[-2], mat2[-1]) in weights or (mat2[-2], mat2[-1]) in weights
