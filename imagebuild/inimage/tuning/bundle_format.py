"""The tuning bundle: a directory of tuned files plus ``tuning.json`` saying what they are
valid for, the check that refuses to apply them anywhere else, and the environment that
makes each library load its file.

Standard library only: the image writes bundles (``imagebuild tune gemm`` there) and its
``tuning`` validation check reads them; the host imports this directly
(``imagebuild.tune.bundle`` adds the digest and raises its errors as TuneError).

Why the check: hipBLASLt compares an override file's first line (``Git Version: <rev>``)
with the running library's git revision and, on a difference, silently turns the override
off for the process (library/src/amd_detail/hipblaslt.cpp,
override_path_compare_git_version); solution indices are not portable across device
architectures (hipBLASLt offline-tuning how-to); TunableOp ignores a results file whose
validators (PT_VERSION, HIPBLASLT_VERSION, GCN_ARCH_NAME, ...) differ (pytorch/pytorch
aten/src/ATen/cuda/tunable/README.md).

Environment (hipBLASLt offline-tuning how-to; pytorch/pytorch
aten/src/ATen/cuda/tunable/README.md; ROCm/TransformerEngine README):
- ``HIPBLASLT_TUNING_OVERRIDE_FILE``: the override file, read by the library itself;
- ``PYTORCH_TUNABLEOP_ENABLED=1``, ``PYTORCH_TUNABLEOP_TUNING=0`` (use, never tune at run
  time), ``PYTORCH_TUNABLEOP_FILENAME``: TunableOp inserts the device ordinal before the
  extension, so ``tunableop_results.csv`` makes rank-local device d read
  ``tunableop_results<d>.csv``; the bundle holds one copy per device ordinal;
- ``TE_HIPBLASLT_ALGO_LOAD``: TransformerEngine's algorithm cache.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from .problems import ProblemError

BUNDLE_FILE = "tuning.json"
FORMAT = 1
#: Kinds of tuned file a bundle may hold, and the library that reads each (hipBLASLt,
#: TunableOp, TransformerEngine, the image's RCCL tuner plugin).
FILE_KINDS = ("hipblaslt_override", "tunableop", "te_algo", "rccl_tuner_config")


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
    """Where a bundle is to be applied; None (or empty): not known here, not compared."""

    image_digest: str | None = None
    hipblaslt_git_version: str | None = None
    torch_version: str | None = None
    gpu_arch: str | None = None
    cu_count: int | None = None
    recipe: str | None = None


#: (field, what to tell the user), in the order a mismatch is reported.
_MATCHED = (("recipe", ("recipe the bundle was tuned in (another recipe is another "
                        "library build)")),
            ("image_digest", "image digest"),
            ("hipblaslt_git_version", ("hipBLASLt git version (the override file's "
             "'Git Version' line; hipBLASLt ignores the file on any difference)")),
            ("torch_version", "torch version (TunableOp's PT_VERSION validator)"),
            ("gpu_arch", "GPU architecture (solution indices are per architecture)"),
            ("cu_count", "GPU compute-unit count (part of every override row)"))

#: Where a runtime mounts a bundle, and where a derived image holds it.
DEFAULT_MOUNT_POINT = "/opt/imagebuild/tuning"
#: Every variable a bundle may set: a run "without the bundle" unsets them all.
TUNING_VARIABLES = ("HIPBLASLT_TUNING_OVERRIDE_FILE", "PYTORCH_TUNABLEOP_ENABLED",
                    "PYTORCH_TUNABLEOP_TUNING", "PYTORCH_TUNABLEOP_FILENAME",
                    "TE_HIPBLASLT_ALGO_LOAD", "NCCL_TUNER_CONFIG_FILE")


def ordinal_name(name: str, device: int) -> str:
    """The file TunableOp reads on ``device`` for PYTORCH_TUNABLEOP_FILENAME=``name``: the
    ordinal goes before the extension."""
    stem, dot, extension = name.rpartition(".")
    return f"{stem}{device}{dot}{extension}" if dot else f"{name}{device}"


def same_revision(have: str, want: str) -> bool:
    """Git revisions agree: equal, or one an abbreviation (7+ hex digits) of the other; the
    library reports a short hash, a lock records the full commit."""
    a, b = have.strip().lower(), want.strip().lower()
    if a == b:
        return True
    short, full = sorted((a, b), key=len)
    return len(short) >= 7 and all(c in "0123456789abcdef" for c in short) \
        and full.startswith(short)


def mismatches(bundle: Bundle, target: Target) -> list[str]:
    """One line per field that differs, naming it with both values."""
    lines = []
    for name, meaning in _MATCHED:
        have, want = getattr(bundle, name), getattr(target, name)
        if have in (None, "", 0) or want in (None, "", 0):
            continue
        same = same_revision(str(have), str(want)) if name == "hipblaslt_git_version" \
            else have == want
        if not same:
            lines.append(f"{name}: bundle has {have!r}, target has {want!r} -- {meaning}")
    return lines


def check_match(bundle: Bundle, target: Target, where: Path) -> None:
    differing = mismatches(bundle, target)
    if differing:
        raise ProblemError(f"{where / BUNDLE_FILE}: the tuning bundle does not match the target\n"
                           + "\n".join(differing)
                           + "\nhint: tune again in this image on this GPU "
                             "(imagebuild tune gemm)")


def tuning_env(bundle: Bundle, mount_point: str = DEFAULT_MOUNT_POINT) -> dict[str, str]:
    """The variables that make each library load its file from the bundle at
    ``mount_point`` (TunableOp: use the results, never tune at run time)."""
    env: dict[str, str] = {}
    files = bundle.files
    if "hipblaslt_override" in files:
        env["HIPBLASLT_TUNING_OVERRIDE_FILE"] = f"{mount_point}/{files['hipblaslt_override']}"
    if "tunableop" in files:
        env.update(PYTORCH_TUNABLEOP_ENABLED="1", PYTORCH_TUNABLEOP_TUNING="0",
                   PYTORCH_TUNABLEOP_FILENAME=f"{mount_point}/{files['tunableop']}")
    if "te_algo" in files:
        env["TE_HIPBLASLT_ALGO_LOAD"] = f"{mount_point}/{files['te_algo']}"
    if "rccl_tuner_config" in files:
        # read by the tuner plugin the image names in NCCL_TUNER_PLUGIN (recipe rccl_tuner)
        env["NCCL_TUNER_CONFIG_FILE"] = f"{mount_point}/{files['rccl_tuner_config']}"
    return env


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
        raise ProblemError(f"{path}: not found\nhint: a tuning bundle is the directory "
                        "`imagebuild tune gemm --out DIR` writes") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ProblemError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise ProblemError(f"{path}: expected a JSON object")
    if data.get("format") != FORMAT:
        raise ProblemError(f"{path}: format: expected {FORMAT}, got {data.get('format')!r}")
    values: dict[str, Any] = {}
    for spec in fields(Bundle):
        if spec.name in ("files", "problems", "created"):
            continue
        nullable = spec.name == "hipblaslt_git_version"
        values[spec.name] = _typed(path, spec.name, data.get(spec.name),
                                   int if spec.name == "cu_count" else str, nullable)
    files = data.get("files", {})
    if not isinstance(files, dict):
        raise ProblemError(f"{path}: files: expected an object of kind -> file name")
    for kind, name in files.items():
        if kind not in FILE_KINDS:
            raise ProblemError(f"{path}: files.{kind}: unknown kind; expected one of "
                            f"{', '.join(FILE_KINDS)}")
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise ProblemError(f"{path}: files.{kind}: expected a file name inside the bundle")
        present = ordinal_name(name, 0) if kind == "tunableop" else name
        if not (directory / present).is_file():
            raise ProblemError(f"{path}: files.{kind}: {present} is missing from {directory}")
    problems = data.get("problems", [])
    if not isinstance(problems, list):
        raise ProblemError(f"{path}: problems: expected a list")
    return Bundle(**values, files=dict(files),
                  problems=tuple(_problem(path, i, p) for i, p in enumerate(problems)),
                  created=str(data.get("created", "")))


def _typed(path: Path, key: str, value: Any, kind: type, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ProblemError(f"{path}: {key}: expected {'an integer' if kind is int else 'a string'}"
                        f", got {value!r}")
    return value


def _problem(path: Path, index: int, raw: Any) -> BundleProblem:
    if not isinstance(raw, dict):
        raise ProblemError(f"{path}: problems[{index}]: expected an object")
    values: dict[str, Any] = {}
    for spec in fields(BundleProblem):
        key = f"problems[{index}].{spec.name}"
        value = raw.get(spec.name)
        if spec.name in ("m", "n", "k", "batch_count"):
            values[spec.name] = _typed(path, key, value, int)
        elif spec.name in ("transA", "transB"):
            if value not in ("N", "T"):
                raise ProblemError(f"{path}: {key}: expected 'N' or 'T', got {value!r}")
            values[spec.name] = value
        elif spec.name == "a_type":
            values[spec.name] = _typed(path, key, value, str)
        elif value is not None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ProblemError(f"{path}: {key}: expected a number or null, got {value!r}")
            values[spec.name] = int(value) if spec.name == "solution_index" else float(value)
    return BundleProblem(**values)


#: The solution name TunableOp writes when the library's own choice won (its DefaultGemmOp,
#: pytorch/pytorch aten/src/ATen/cuda/tunable/TunableGemm.h).
TUNABLEOP_DEFAULT = "Default"


def only_defaults(directory: Path, bundle: Bundle) -> str | None:
    """Why the bundle changes no kernel, when TunableOp's results are all the library's
    own choice and no hipBLASLt override comes with them; None otherwise."""
    if "tunableop" not in bundle.files or set(bundle.files) - {"tunableop"}:
        return None  # another file (an override, TE's, the tuner's) may change something
    path = directory / ordinal_name(bundle.files["tunableop"], 0)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    solutions = [fields[2] for fields in (line.split(",") for line in lines)
                 if len(fields) >= 4 and fields[0] != "Validator"]
    if not solutions or any(s != TUNABLEOP_DEFAULT for s in solutions):
        return None
    return (f"TunableOp kept the library's default GEMM ({TUNABLEOP_DEFAULT!r}) for all "
            f"{len(solutions)} problems: the bundle changes no kernel here, there is nothing "
            "to apply")
