"""The configs of hipBLASLt's own offline tuner, ``utilities/find_exact.py``, and where an
image keeps it: the route the users' notes follow.

    python3 find_exact.py CONFIG.yaml <hipBLASLt build dir> <output dir>

A config (ROCm/hipBLASLt ``utilities/template.yaml``; find_exact.py's ``findExact``) is one
problem type and its sizes:
- ``Bench.ProblemType``: ``TransposeA``/``TransposeB`` (0/1), ``DataTypeA``..``DataTypeD`` and
  ``ComputeInputDataType`` as find_exact's letters (``dataType2Bench``: H, S, FP8, and B in
  builds that know bf16), ``ComputeDataType`` S, ``UseBias``;
- ``Bench.TestConfig``: ``ColdIter``, ``Iter``, ``AlgoMethod: "all"`` (every solution),
  ``RotatingBuffer`` in MiB;
- ``Bench.TuningParameters.SplitK: [0]``;
- ``Bench.ProblemSizes``: rows ``[m, n, batch_count, k]`` (find_exact passes ``-m size[0] -n
  size[1] -k size[3] --batch_count size[2]``), in hipblaslt-bench's column-major terms, as
  ``tune shapes`` writes them;
- ``CreateLogic: {}``: after the runs, each winner's logic YAML is rewritten with only that
  size (``1_LogicYaml/``), read from ``<build dir>/library/MatchTable.yaml``.
find_exact.py reads only its first config, so each problem type is its own file and run.

Standard library only: the YAML is written by hand (flow lists, plain scalars).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..image_manifest import load_manifest, section
from ..options import DEFAULT_MANIFEST, MANIFEST_ENV
from .problems import GemmProblem, ProblemStat

SCRIPT_ENV = "IMAGEBUILD_FIND_EXACT"
BUILD_DIR_ENV = "IMAGEBUILD_HIPBLASLT_BUILD_DIR"
#: Where an image keeps find_exact.py and the hipBLASLt build tree it runs against when the
#: image manifest does not say (its ``hipblaslt.tuning_kit``: ``find_exact``, ``build_dir``).
#: The one place the image's layout is named on this side.
DEFAULT_SCRIPT = "/opt/hipblaslt/tuning/utilities/find_exact.py"
DEFAULT_BUILD_DIR = "/opt/hipblaslt/tuning/build/release"
#: hipBLASLt datatype -> find_exact.py's letter (``dataType2Bench``; it upper-cases them).
LETTERS = {"f16_r": "h", "f32_r": "s", "bf16_r": "b", "f8_r": "fp8"}
#: The compute types find_exact.py can ask for (``computeType2Bench`` takes S only).
COMPUTE = {"f32_r": "s"}
CONFIG_DIR = "find_exact"


@dataclass(frozen=True)
class FindExactLayout:
    """find_exact.py and the build directory it runs against, and where that was found."""

    script: Path
    build_dir: Path
    origin: str

    @property
    def bench(self) -> Path:
        """What find_exact.py runs (its ``execBenchPath``)."""
        return self.build_dir / "clients" / "staging" / "hipblaslt-bench"

    @property
    def match_table(self) -> Path:
        """What its CreateLogic step reads (``CreateExact``'s ``tableFile``)."""
        return self.build_dir / "library" / "MatchTable.yaml"


def find_exact_layout(script: Path | None = None, build_dir: Path | None = None
                      ) -> FindExactLayout:
    """The flags', else $IMAGEBUILD_FIND_EXACT / $IMAGEBUILD_HIPBLASLT_BUILD_DIR, else the
    image manifest's tuning kit, else DEFAULT_SCRIPT / DEFAULT_BUILD_DIR."""
    manifest, _ = load_manifest(os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST)
    kit = section(section(manifest, "hipblaslt"), "tuning_kit")
    found_script = script or _path(os.environ.get(SCRIPT_ENV)) or _path(kit.get("find_exact"))
    found_dir = build_dir or _path(os.environ.get(BUILD_DIR_ENV)) or _path(kit.get("build_dir"))
    origin = ("the flags" if script or build_dir else
              "the environment" if os.environ.get(SCRIPT_ENV) or os.environ.get(BUILD_DIR_ENV)
              else "the image manifest's tuning kit" if kit else "the default layout")
    return FindExactLayout(found_script or Path(DEFAULT_SCRIPT),
                           found_dir or Path(DEFAULT_BUILD_DIR), origin)


def _path(value: object) -> Path | None:
    return Path(str(value)) if value else None


def script_letters(script: Path) -> set[str]:
    """The data-type letters a find_exact.py accepts, read from its ``dataType2Bench``
    (``if dataType == "H"``): the 2024 script has H, S and FP8, later ones add B."""
    return {letter.lower() for letter in
            re.findall(r'dataType\s*==\s*"(\w+)"', script.read_text(errors="replace"))}


@dataclass(frozen=True)
class ProblemType:
    """What one find_exact.py config holds apart from the sizes."""

    trans_a: str
    trans_b: str
    a_type: str
    b_type: str
    c_type: str
    d_type: str
    compute_type: str

    @staticmethod
    def of(problem: GemmProblem) -> ProblemType:
        return ProblemType(problem.trans_a, problem.trans_b, problem.a_type, problem.b_type,
                           problem.c_type, problem.d_type, problem.compute_type)

    def unsupported(self) -> str | None:
        """Why find_exact.py cannot take this type, None when it can."""
        names = (self.a_type, self.b_type, self.c_type, self.d_type)
        if any(name not in LETTERS for name in names):
            return f"data types {', '.join(names)}: find_exact.py takes {', '.join(LETTERS)}"
        if self.compute_type not in COMPUTE:
            return f"compute type {self.compute_type}: find_exact.py computes in f32_r only"
        if self.c_type != self.d_type:
            return "C and D types differ: find_exact.py asserts DataTypeC == DataTypeD"
        return None

    def letters(self) -> tuple[str, str, str, str]:
        return (LETTERS[self.a_type], LETTERS[self.b_type], LETTERS[self.c_type],
                LETTERS[self.d_type])

    def name(self) -> str:
        """A file name for the config: ``TN_hhhh_s``."""
        return f"{self.trans_a}{self.trans_b}_{''.join(self.letters())}_" \
               f"{COMPUTE[self.compute_type]}"


@dataclass(frozen=True)
class Settings:
    cold_iters: int
    iters: int
    rotating_mb: int
    #: why that rotating buffer (the GPU's cache, or hipBLASLt's default), for the header
    rotating_why: str


@dataclass(frozen=True)
class Config:
    path: Path
    problem_type: ProblemType
    sizes: tuple[tuple[int, int, int, int], ...]  # [m, n, batch_count, k]


def sizes_of(problems: list[GemmProblem]) -> tuple[tuple[int, int, int, int], ...]:
    """The ``ProblemSizes`` rows, sorted and without repeats as find_exact.py makes them."""
    return tuple(sorted({(p.m, p.n, p.batch_count, p.k) for p in problems}))


def config_text(problem_type: ProblemType, sizes: tuple[tuple[int, int, int, int], ...],
                settings: Settings, origin: str) -> str:
    a, b, c, d = problem_type.letters()
    lines = [
        f"# find_exact.py config written by imagebuild tune gemm --find-exact from {origin}:",
        f"# {len(sizes)} problem(s) of type {problem_type.name()}; rows [m, n, batch_count, k].",
        f"# RotatingBuffer: {settings.rotating_why}.",
        "Bench:",
        "  ProblemType:",
        f"    ComputeDataType: {COMPUTE[problem_type.compute_type]}",
        f"    ComputeInputDataType: {a}",
        f"    DataTypeA: {a}",
        f"    DataTypeB: {b}",
        f"    DataTypeC: {c}",
        f"    DataTypeD: {d}",
        f"    TransposeA: {int(problem_type.trans_a == 'T')}",
        f"    TransposeB: {int(problem_type.trans_b == 'T')}",
        "    UseBias: False",
        "  TestConfig:",
        f"    ColdIter: {settings.cold_iters}",
        f"    Iter: {settings.iters}",
        '    AlgoMethod: "all"',
        f"    RotatingBuffer: {settings.rotating_mb}",
        "  TuningParameters:",
        "    SplitK: [0]",
        "  ProblemSizes:",
        *(f"  - [{m}, {n}, {batch}, {k}]" for m, n, batch, k in sizes),
        "CreateLogic: {}",
    ]
    return "\n".join(lines) + "\n"


def write_configs(stats: list[ProblemStat], directory: Path, settings: Settings,
                  origin: str) -> tuple[list[Config], list[tuple[ProblemType, str, int]]]:
    """One config per problem type under ``directory`` (each written to a temporary name,
    then renamed); (configs, [(type, why not, problems)] for the types find_exact.py cannot
    take)."""
    by_type: dict[ProblemType, list[GemmProblem]] = {}
    for stat in stats:
        by_type.setdefault(ProblemType.of(stat.problem), []).append(stat.problem)
    configs: list[Config] = []
    refused: list[tuple[ProblemType, str, int]] = []
    directory.mkdir(parents=True, exist_ok=True)
    for problem_type, problems in by_type.items():
        why = problem_type.unsupported()
        if why is not None:
            refused.append((problem_type, why, len(problems)))
            continue
        sizes = sizes_of(problems)
        path = directory / f"{problem_type.name()}.yaml"
        partial = path.with_name(path.name + ".partial")
        partial.write_text(config_text(problem_type, sizes, settings, origin))
        os.replace(partial, path)
        configs.append(Config(path, problem_type, sizes))
    return configs, refused
