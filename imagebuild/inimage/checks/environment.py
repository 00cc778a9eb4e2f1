"""environment: what is installed matches what the image was built from (its manifest).

Compares the Python version, every wheel the manifest pins (importlib.metadata), the ROCm
release (/opt/rocm/.info/version) and the HIP version torch was built against, and the
GPU architecture against the recipe's targets; where the image carries TransformerEngine,
the settings AMD's training setups give it for the GPU (te_settings.py). Without a manifest
(a local run) the versions are reported and the comparison is skipped, with that reason.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import re
from pathlib import Path
from typing import Any

import torch

from ..check_context import Context
from ..result import NOT_APPLICABLE, CheckResult, judge, skipped
from . import te_settings

NAME = "environment"


def rocm_release() -> str | None:
    """The ROCm release of the installation (e.g. '7.0.2'), or None without ROCm."""
    root = Path(os.environ.get("ROCM_PATH", "/opt/rocm"))
    for candidate in (root / ".info" / "version", root / ".info" / "version-dev"):
        try:
            text = candidate.read_text().strip()
        except OSError:
            continue
        match = re.match(r"\d+\.\d+(\.\d+)?", text)
        if match:
            return match.group(0)
    return None


def _major_minor(version: str | None) -> str | None:
    match = re.match(r"(\d+)\.(\d+)", version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else None


def installed_versions() -> dict[str, Any]:
    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_git": getattr(torch.version, "git_version", None),
        "hip": getattr(torch.version, "hip", None),
        "cuda": getattr(torch.version, "cuda", None),
        "rocm": rocm_release(),
    }
    try:
        nccl = torch.cuda.nccl.version()
        versions["nccl"] = ".".join(str(p) for p in nccl) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # noqa: BLE001 - CPU builds lack NCCL/RCCL, raising various errors
        versions["nccl"] = None
    try:
        versions["cudnn_or_miopen"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - absent on CPU builds
        versions["cudnn_or_miopen"] = None
    return versions


def distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def compare(manifest: dict[str, Any], versions: dict[str, Any], device_arch: str | None,
            vendor: str | None) -> tuple[list[str], list[str], dict[str, Any]]:
    """(problems, notes, figures) of the manifest against what is installed."""
    problems: list[str] = []
    notes: list[str] = []
    figures: dict[str, Any] = {}

    wanted_python = manifest.get("python_version")
    if wanted_python:
        have = versions["python"].split(".")
        want = str(wanted_python).split(".")
        if have[: len(want)] != want:
            problems.append(f"python {versions['python']}, manifest {wanted_python}")

    wheels = manifest.get("wheels") or {}
    mismatched = []
    for name, wanted in sorted(wheels.items()):
        have = distribution_version(name)
        if have is None:
            mismatched.append(f"{name} not installed (manifest {wanted})")
        elif have.lower() != str(wanted).lower():
            mismatched.append(f"{name} {have}, manifest {wanted}")
    figures["wheels_compared"] = len(wheels)
    figures["wheels_mismatched"] = mismatched
    if mismatched:
        shown = mismatched[:3] + ([f"{len(mismatched) - 3} more"] if len(mismatched) > 3 else [])
        problems.append("wheels: " + ", ".join(shown))

    if "rocm_version" in manifest:
        wanted_rocm = manifest.get("rocm_version")
        if wanted_rocm:
            have_rocm = versions.get("rocm")
            if have_rocm is None:
                problems.append(f"ROCm {wanted_rocm} expected, no /opt/rocm/.info/version found")
            elif not _same_release(have_rocm, str(wanted_rocm)):
                problems.append(f"ROCm {have_rocm}, manifest {wanted_rocm}")
            hip = versions.get("hip")
            if hip and _major_minor(hip) != _major_minor(str(wanted_rocm)):
                problems.append(f"torch built for HIP {hip}, image has ROCm {wanted_rocm}")
            elif not hip:
                problems.append(f"torch {versions['torch']} is not a ROCm build "
                                f"(manifest ROCm {wanted_rocm})")
        elif versions.get("hip"):
            notes.append(f"manifest says CPU-only, torch is built for HIP {versions['hip']}")

    targets = manifest.get("gpu_targets") or []
    if targets:
        if device_arch is None:
            notes.append(f"no GPU: architecture not compared with targets {', '.join(targets)}")
        elif vendor != "amd":
            notes.append(f"{device_arch} is not an AMD GPU: gpu_targets not compared")
        elif device_arch not in targets:
            problems.append(f"GPU architecture {device_arch} is not among the image's targets "
                            f"{', '.join(targets)}")
    return problems, notes, figures


def _same_release(have: str, wanted: str) -> bool:
    want_parts = wanted.split(".")
    return have.split(".")[: len(want_parts)] == want_parts


def run(ctx: Context) -> CheckResult:
    versions = installed_versions()
    manifest = ctx.manifest
    figures: dict[str, Any] = {"versions": versions, "manifest_path": ctx.manifest_path}
    if manifest is None:
        reason = ctx.manifest_problem or "no manifest"
        if "unreadable" in reason or "expected a JSON" in reason:
            return judge(NAME, [reason], "", figures)
        return skipped(NAME, NOT_APPLICABLE,
                       f"{reason}: versions reported, not compared "
                       f"(python {versions['python']}, torch {versions['torch']})", figures)
    wheels = manifest.get("wheels") or {}
    figures["manifest"] = {k: manifest.get(k) for k in
                           ("recipe", "input_hash", "rocm_version", "python_version",
                            "gpu_targets")}
    figures["distributions"] = {name: distribution_version(name) for name in sorted(wheels)}
    arch = ctx.gpu.arch if ctx.gpu else None
    problems, notes, extra = compare(manifest, versions, arch, ctx.gpu.vendor if ctx.gpu else None)
    figures.update(extra)
    if te_settings.carries_te(manifest, distribution_version("transformer-engine") is not None):
        on_gpu = bool(arch and ctx.gpu and ctx.gpu.vendor == "amd")
        te_problems, te_notes, rows = te_settings.compare(
            os.environ, (arch,) if on_gpu and arch else tuple(manifest.get("gpu_targets") or ()),
            "this GPU" if on_gpu else "the image's targets; no AMD GPU here")
        problems += te_problems
        notes += te_notes
        figures["transformer_engine_settings"] = rows
    figures["notes"] = notes
    rocm = f", ROCm {versions['rocm']}" if versions.get("rocm") else ""
    ok = (f"python {versions['python']}, torch {versions['torch']}{rocm} and "
          f"{len(wheels)} pinned wheels match the manifest")
    if notes:
        ok += f" ({'; '.join(notes)})"
    return judge(NAME, problems, ok, figures)
