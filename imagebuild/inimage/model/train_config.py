"""When two train-step figures are comparable, and the configuration in one line.

Standard library only (no torch): ``imagebuild report`` imports it on hosts without torch.
tokens/s depends on every key of COMPARISON_KEYS (a 6-block proxy runs 4x the tokens/s of
the 32-block model); TFLOP/s per GPU and MFU count the FLOPs of what ran, so they compare
across configurations, tokens/s only within one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The configuration keys that must match for tokens/s of two runs to be comparable.
COMPARISON_KEYS = ("model", "layers", "dim", "ffn_dim", "vocab", "seq", "micro_batch",
                   "activation_checkpointing", "world_size", "precision", "compile")


def comparison_key(setup: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(setup.get(key) for key in COMPARISON_KEYS)


def describe(setup: Mapping[str, Any]) -> str:
    """One line: '32 blocks, seq 8192, micro-batch 1, AC selective, 8 ranks, bf16, eager'."""
    precision = "bf16" if "bf16" in str(setup.get("precision")) else setup.get("precision")
    return (f"{setup.get('layers')} blocks, seq {setup.get('seq')}, micro-batch "
            f"{setup.get('micro_batch')}, AC {setup.get('activation_checkpointing')}, "
            f"{setup.get('world_size')} rank(s), {precision}, "
            f"{'compiled' if setup.get('compile') else 'eager'}")


