"""The tuning bundle: a directory of tuned files plus ``tuning.json`` saying what they are
valid for, and the check that refuses to apply them anywhere else.

Why the check: hipBLASLt compares an override file's first line (``Git Version: <rev>``)
with the running library's git revision and, on a difference, silently turns the override
off for the process (library/src/amd_detail/hipblaslt.cpp,
override_path_compare_git_version); solution indices are not portable across device
architectures (hipBLASLt offline-tuning how-to); TunableOp ignores a results file whose
validators (PT_VERSION, HIPBLASLT_VERSION, GCN_ARCH_NAME, ...) differ (pytorch/pytorch
aten/src/ATen/cuda/tunable/README.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .problem import TuneError

BUNDLE_FILE = "tuning.json"
FORMAT = 1
#: Kinds of tuned file a bundle may hold, and the library that reads each.
FILE_KINDS = ("hipblaslt_override", "tunableop", "te_algo")


@dataclass(frozen=True)
class BundleProblem:
    m: int
    n: int
    k: int
    batch_count: int
    transA: str
    transB: str
    a_type: str
    before_us: float | None = None
    after_us: float | None = None
    solution_index: int | None = None


@dataclass(frozen=True)
class Bundle:
    image_digest: str
    recipe: str
    hipblaslt_git_version: str | None
    torch_version: str
    gpu_arch: str
    cu_count: int
    files: dict[str, str] = field(default_factory=dict)  # kind -> file name in the bundle
    problems: tuple[BundleProblem, ...] = ()
    created: str = ""


@dataclass(frozen=True)
class Target:
    """Where a bundle is to be applied; None: not known here, not compared."""

    image_digest: str | None = None
    hipblaslt_git_version: str | None = None
    torch_version: str | None = None
    gpu_arch: str | None = None
    cu_count: int | None = None


#: (bundle field, target field, what to tell the user)
_MATCHED = (("image_digest", "image digest"),
            ("hipblaslt_git_version", ("hipBLASLt git version (the override file's "
             "'Git Version' line; hipBLASLt ignores the file on any difference)")),
            ("torch_version", "torch version (TunableOp's PT_VERSION validator)"),
            ("gpu_arch", "GPU architecture (solution indices are per architecture)"),
            ("cu_count", "GPU compute-unit count (part of every override row)"))


def ordinal_name(name: str, device: int) -> str:
    """The file TunableOp reads on ``device`` for PYTORCH_TUNABLEOP_FILENAME=``name``: the
    ordinal goes before the extension."""
    stem, dot, extension = name.rpartition(".")
    return f"{stem}{device}{dot}{extension}" if dot else f"{name}{device}"


def mismatches(bundle: Bundle, target: Target) -> list[str]:
    """One line per field that differs, naming it with both values."""
    lines = []
    for name, meaning in _MATCHED:
        have, want = getattr(bundle, name), getattr(target, name)
        if want is not None and have is not None and have != want:
            lines.append(f"{name}: bundle has {have!r}, target has {want!r} -- {meaning}")
    return lines


def check_match(bundle: Bundle, target: Target, where: Path) -> None:
    differing = mismatches(bundle, target)
    if differing:
        raise TuneError(f"{where / BUNDLE_FILE}: the tuning bundle does not match the target\n"
                        + "\n".join(differing)
                        + "\nhint: tune again in this image on this GPU (imagebuild tune gemm)")


def write_bundle(directory: Path, bundle: Bundle) -> Path:
    """Write ``tuning.json`` (atomically: a half-written file never replaces a good one)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, **asdict(bundle)}
    data["problems"] = [asdict(p) for p in bundle.problems]
    path = directory / BUNDLE_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def read_bundle(directory: Path) -> Bundle:
    """Read and check ``tuning.json``; errors name the key path."""
    path = directory / BUNDLE_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise TuneError(f"{path}: not found\nhint: a tuning bundle is the directory "
                        "`imagebuild tune gemm --out DIR` writes") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise TuneError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise TuneError(f"{path}: expected a JSON object")
    if data.get("format") != FORMAT:
        raise TuneError(f"{path}: format: expected {FORMAT}, got {data.get('format')!r}")
    values: dict[str, Any] = {}
    for spec in fields(Bundle):
        if spec.name in ("files", "problems", "created"):
            continue
        nullable = spec.name == "hipblaslt_git_version"
        values[spec.name] = _typed(path, spec.name, data.get(spec.name),
                                   int if spec.name == "cu_count" else str, nullable)
    files = data.get("files", {})
    if not isinstance(files, dict):
        raise TuneError(f"{path}: files: expected an object of kind -> file name")
    for kind, name in files.items():
        if kind not in FILE_KINDS:
            raise TuneError(f"{path}: files.{kind}: unknown kind; expected one of "
                            f"{', '.join(FILE_KINDS)}")
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise TuneError(f"{path}: files.{kind}: expected a file name inside the bundle")
        present = ordinal_name(name, 0) if kind == "tunableop" else name
        if not (directory / present).is_file():
            raise TuneError(f"{path}: files.{kind}: {present} is missing from {directory}")
    problems = data.get("problems", [])
    if not isinstance(problems, list):
        raise TuneError(f"{path}: problems: expected a list")
    return Bundle(**values, files=dict(files),
                  problems=tuple(_problem(path, i, p) for i, p in enumerate(problems)),
                  created=str(data.get("created", "")))


def _typed(path: Path, key: str, value: Any, kind: type, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TuneError(f"{path}: {key}: expected {'an integer' if kind is int else 'a string'}"
                        f", got {value!r}")
    return value


def _problem(path: Path, index: int, raw: Any) -> BundleProblem:
    if not isinstance(raw, dict):
        raise TuneError(f"{path}: problems[{index}]: expected an object")
    values: dict[str, Any] = {}
    for spec in fields(BundleProblem):
        key = f"problems[{index}].{spec.name}"
        value = raw.get(spec.name)
        if spec.name in ("m", "n", "k", "batch_count"):
            values[spec.name] = _typed(path, key, value, int)
        elif spec.name in ("transA", "transB"):
            if value not in ("N", "T"):
                raise TuneError(f"{path}: {key}: expected 'N' or 'T', got {value!r}")
            values[spec.name] = value
        elif spec.name == "a_type":
            values[spec.name] = _typed(path, key, value, str)
        elif value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TuneError(f"{path}: {key}: expected a number or null, got {value!r}")
            values[spec.name] = int(value) if spec.name == "solution_index" else float(value)
    return BundleProblem(**values)
