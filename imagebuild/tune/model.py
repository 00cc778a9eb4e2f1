"""The GEMM problems of one Llama training step, derived from the model's dimensions: the
code is ``validate/checks/tune_model.py`` (images carry it; see there for the rules)."""

from imagebuild.validate.checks.tune_model import (
    Linear,
    linear_problems,
    linears,
    training_step_problems,
)

__all__ = ["Linear", "linear_problems", "linears", "training_step_problems"]
