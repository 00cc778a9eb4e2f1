"""TransformerEngine's settings for the GPU it runs on, as AMD's training setups give them.

NVTE_CK_IS_V3_ATOMIC_FP32 picks fp32 atomics in the CK v3 attention backward (1) or bf16 ones
(0). AMD's Megatron-LM benchmark script sets it to 1 on MI300X and MI325X, the gfx942 GPUs,
and leaves it alone on MI355X (ROCm/MAD scripts/primus/megatron-lm/
primus_megatron-lm_benchmark_report.sh: "export NVTE_CK_IS_V3_ATOMIC_FP32=1"); others set 0
only with the note "try setting this to 1 if we get NAN loss in training". ROCm/
TransformerEngine reads it with a default of 1 (transformer_engine/common/fused_attn_rocm/
fused_attn_ck.cpp, getenv<int>("NVTE_CK_IS_V3_ATOMIC_FP32", 1)), so unset is 1 in the TE
builds read; a TE whose default differs would not say so, which is why the image sets it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..image_manifest import section


@dataclass(frozen=True)
class Expected:
    variable: str
    value: str
    #: GPU architectures it is given for.
    archs: tuple[str, ...]
    source: str


EXPECTED = (
    Expected("NVTE_CK_IS_V3_ATOMIC_FP32", "1", ("gfx942",),
             "ROCm/MAD scripts/primus/megatron-lm/primus_megatron-lm_benchmark_report.sh"),
)


def carries_te(manifest: Mapping[str, Any] | None, installed: bool) -> bool:
    """The manifest's transformer_engine.enabled, else whether TE is installed."""
    if manifest is not None and "transformer_engine" in manifest:
        return bool(section(dict(manifest), "transformer_engine").get("enabled"))
    return installed


def compare(env: Mapping[str, str], archs: tuple[str, ...], where: str
            ) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """(problems, notes, rows) for the GPU architectures ``archs`` (``where`` says whose:
    this GPU's, or the image's targets without one)."""
    problems: list[str] = []
    notes: list[str] = []
    rows: list[dict[str, Any]] = []
    for expected in EXPECTED:
        hit = [a for a in archs if a.split(":")[0] in expected.archs]
        if not hit:
            continue
        value = env.get(expected.variable)
        rows.append({"variable": expected.variable, "expected": expected.value, "set": value,
                     "for": hit, "source": expected.source})
        if value is None:
            notes.append(f"TransformerEngine on {', '.join(hit)} ({where}): "
                         f"{expected.variable} is unset, so TE's own default applies (1 in "
                         f"ROCm/TransformerEngine); AMD's training setups set "
                         f"{expected.variable}={expected.value} there")
        elif value.strip() != expected.value:
            problems.append(f"TransformerEngine on {', '.join(hit)} ({where}): "
                            f"{expected.variable}={value}, AMD's training setups set "
                            f"{expected.value} there ({expected.source})")
    return problems, notes, rows
