"""PyTorch GEMM ops (as a profiler records them) -> hipBLASLt problems: the code is
``validate/checks/tune_ops.py``, which images carry (see its docstring for the rules)."""

from imagebuild.validate.checks.tune_ops import (
    LEAF_GEMMS,
    RecordedOp,
    layout,
    operand_positions,
    to_problem,
)

__all__ = ["LEAF_GEMMS", "RecordedOp", "layout", "operand_positions", "to_problem"]
