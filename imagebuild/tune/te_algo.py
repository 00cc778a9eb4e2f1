"""The file TransformerEngine on ROCm loads with ``TE_HIPBLASLT_ALGO_LOAD``, written from a
tuning bundle's hipBLASLt results, and a reader that follows TE's own reading rules.

TE's format and matching, as read in ROCm/TransformerEngine
``transformer_engine/common/gemm/rocm_gemm.cu`` (class GemmAlgoCache): the layout "2024"
as the autotune storage was introduced (branch ipanfilo/autotune-storage, commit f60583a0,
2024-10-24, pull request 67) and read up to TE 2.2, the layout "2025" with an
``fp8_scale`` column after ``ldd`` (pull request 318, TE 2.4 on); which TE reads which is
te_layout.py's table:

- the first line is a legend that must equal TE's exactly, else the whole file is refused
  ("Incorrect algo storage legend"): ``dev_cap,m,n,k,trans_a,trans_b,type_a,type_b,
  type_d,bias_type,lda,ldb,ldd[,fp8_scale],epi,comp,scale,ws_min,ws_max,algo_id,aidx``;
- then one row per entry; blank lines and lines starting with ``#`` are skipped, as are
  rows whose ``dev_cap`` (major * 100 + minor of hipDeviceProp_t) is no device present,
  whose ``comp`` is not ``f32`` or ``scale`` not ``float32``, whose ``ws_min > ws_max``,
  and (layout 2025) whose ``fp8_scale`` is not 0 on hipBLASLt < 0.15; a name outside
  TE's tables (types ``float32|float16|bfloat16|float8e4m3|float8e5m2``, ``N|T``,
  epilogues ``-|bias|geluaux|geluauxbias|dgelu|dgelubgrad|bgradb``) raises an error
  inside TE, so this writer never emits one;
- an entry applies to a GEMM whose key is equal on every one of (dev_cap, types,
  bias_type, m, n, k, lda, ldb, ldd, trans_a, trans_b[, fp8_scale], epi) and whose
  workspace size lies in [ws_min, ws_max]; ``bias_type`` is ``-`` except for FP8 GEMMs;
- TE then asks hipBLASLt's heuristic for max(candidates, aidx + 1) algorithms and takes
  the one whose first 8 bytes (``algo_id``) equal the row's, starting at position
  ``aidx``; not found: "[WARNING] Cannot find cached algoId", and TE picks as without
  the file.

What a bundle gives: the hipBLASLt solution index of each tuned problem (hipblaslt-bench's
winner, or TunableOp's ``Gemm_Hipblaslt_<index>``); hipBLASLt keeps that index in the
first 4 bytes of ``hipblasLtMatmulAlgo_t.data`` (hipblaslt-ext ``getIndexFromAlgo``), so
``algo_id`` is the index when the next 4 bytes are zero -- true of the algorithms the
heuristic returns as far as the public source shows, but only a GPU run proves it (TE's
warning above says when not). The heuristic's position of the solution is not known
offline, so ``aidx`` is set to the search depth (TE then asks for that many candidates
and scans them all). Leading dimensions are those of contiguous operands (lda = m or k,
ldb = k or n, ldd = m), the epilogue none, D of the inputs' type: the GEMMs of a bf16
Llama step without biases. One file serves one TE build: its layout must be the one that
build reads (te_layout.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning.bundle_format import Bundle, ordinal_name, write_bundle
from imagebuild.inimage.tuning.library_logs import parse_tunableop_row
from imagebuild.inimage.tuning.te_online import TE_FILE

#: The legend of each layout TE has read, without and with the ``fp8_scale`` column.
LEGENDS = {
    "2025": ("dev_cap,m,n,k,trans_a,trans_b,type_a,type_b,type_d,bias_type,lda,ldb,ldd,"
                "fp8_scale,epi,comp,scale,ws_min,ws_max,algo_id,aidx"),
    "2024": ("dev_cap,m,n,k,trans_a,trans_b,type_a,type_b,type_d,bias_type,lda,ldb,ldd,"
             "epi,comp,scale,ws_min,ws_max,algo_id,aidx"),
}
#: hipBLASLt datatype names (bundle) -> TE's names (rocm_gemm.cu type_name_map).
TE_TYPES = {"f32_r": "float32", "f16_r": "float16", "bf16_r": "bfloat16",
            "f8_r": "float8e4m3", "bf8_r": "float8e5m2"}
EPILOGUES = ("-", "bias", "geluaux", "geluauxbias", "dgelu", "dgelubgrad", "bgradb")
#: Any workspace size (size_t's range): the heuristic itself drops algorithms that need
#: more workspace than TE offers.
WS_ANY = (0, 2**64 - 1)
#: Candidates TE asks the heuristic for when the row's position is unknown.
DEFAULT_SEARCH_DEPTH = 256
_HIPBLASLT_SOLUTION = re.compile(r"^Gemm_Hipblaslt_(?P<index>\d+)$")


@dataclass(frozen=True)
class TeKey:
    dev_cap: int
    m: int
    n: int
    k: int
    trans_a: str
    trans_b: str
    type_a: str
    type_b: str
    type_d: str
    bias_type: str
    lda: int
    ldb: int
    ldd: int
    fp8_scale: int
    epi: str


@dataclass(frozen=True)
class TeEntry:
    key: TeKey
    ws_min: int
    ws_max: int
    algo_id: int
    aidx: int


def dev_cap(gpu_arch: str) -> int:
    """hipDeviceProp_t major * 100 + minor of an AMD architecture name: ``gfx<major><minor
    digit><stepping digit>`` (gfx942 -> 9, 4 -> 904; gfx90a -> 900; gfx1100 -> 1100)."""
    name = gpu_arch.split(":", 1)[0].strip().lower()
    match = re.fullmatch(r"gfx(?P<major>\d{1,2})(?P<minor>[0-9a-f])(?P<step>[0-9a-f])", name)
    if match is None:
        raise TuneError(f"gpu_arch {gpu_arch!r}: not an AMD architecture name (gfxNNN)",
                        hint="pass --dev-cap MAJOR*100+MINOR (HIP's hipDeviceProp_t)")
    return int(match["major"]) * 100 + int(match["minor"], 16)


def _key(cap: int, m: int, n: int, k: int, ta: str, tb: str, data_type: str,
         lda: int | None = None, ldb: int | None = None, ldd: int | None = None) -> TeKey:
    te_type = TE_TYPES[data_type]
    return TeKey(cap, m, n, k, ta, tb, te_type, te_type, te_type, "-",
                 lda or (m if ta == "N" else k), ldb or (k if tb == "N" else n), ldd or m, 0,
                 "-")


def tunableop_solutions(path: Path) -> dict[tuple, tuple[int, tuple[int, int, int] | None]]:
    """(m, n, k, batch, ta, tb, type) -> (hipBLASLt solution index, leading dimensions when
    the row gives them) of a TunableOp results file; rows TunableOp solved with rocBLAS
    or its default are not hipBLASLt algorithms and are left out."""
    found: dict[tuple, tuple[int, tuple[int, int, int] | None]] = {}
    for line in path.read_text(errors="replace").splitlines():
        cells = line.split(",")
        if len(cells) < 3 or not (solution := _HIPBLASLT_SOLUTION.match(cells[2].strip())):
            continue
        problem = parse_tunableop_row(cells[0], cells[1])
        if problem is None:
            continue
        lds = re.search(r"_ld_(\d+)_(\d+)_(\d+)$", cells[1].strip())
        found[(problem.m, problem.n, problem.k, problem.batch_count, problem.trans_a,
               problem.trans_b, problem.a_type)] = (
            int(solution["index"]),
            (int(lds[1]), int(lds[2]), int(lds[3])) if lds else None)
    return found


def te_entries(bundle_dir: Path, bundle: Bundle, cap: int | None = None,
               search_depth: int = DEFAULT_SEARCH_DEPTH) -> list[TeEntry]:
    """One entry per tuned, unbatched problem of the bundle with a hipBLASLt solution:
    hipblaslt-bench's winner first, else TunableOp's choice."""
    cap = cap if cap is not None else dev_cap(bundle.gpu_arch)
    tunableop: dict[tuple, tuple[int, tuple[int, int, int] | None]] = {}
    if "tunableop" in bundle.files:
        tunableop = tunableop_solutions(bundle_dir / ordinal_name(bundle.files["tunableop"], 0))
    entries: dict[TeKey, TeEntry] = {}
    for p in bundle.problems:
        if p.batch_count != 1 or p.a_type not in TE_TYPES:
            continue  # TE's linear layers run unbatched GEMMs
        chosen = tunableop.get((p.m, p.n, p.k, 1, p.transA, p.transB, p.a_type))
        if p.solution_index is not None and p.solution_index > 0:
            key = _key(cap, p.m, p.n, p.k, p.transA, p.transB, p.a_type)
            index = p.solution_index
        elif chosen is not None:
            key = _key(cap, p.m, p.n, p.k, p.transA, p.transB, p.a_type, *(chosen[1] or ()))
            index = chosen[0]
        else:
            continue
        entries.setdefault(key, TeEntry(key, *WS_ANY, index, max(search_depth, 1) - 1))
    return list(entries.values())


def te_file_text(entries: Iterable[TeEntry], layout: str = "2025") -> str:
    lines = [LEGENDS[layout]]
    for e in entries:
        k = e.key
        cells = [k.dev_cap, k.m, k.n, k.k, k.trans_a, k.trans_b, k.type_a, k.type_b,
                 k.type_d, k.bias_type, k.lda, k.ldb, k.ldd]
        if layout == "2025":
            cells.append(k.fp8_scale)
        cells += [k.epi, "f32", "float32", e.ws_min, e.ws_max, e.algo_id, e.aidx]
        lines.append(",".join(str(c) for c in cells))
    return "\n".join(lines) + "\n"


def write_te_file(bundle_dir: Path, bundle: Bundle, entries: list[TeEntry],
                  layout: str = "2025") -> Path:
    """Write TE_FILE into the bundle and record it in tuning.json (kind ``te_algo``), so
    the bundle's runtime wiring sets TE_HIPBLASLT_ALGO_LOAD; each written atomically."""
    if not entries:
        raise TuneError(f"{bundle_dir}: no tuned problem with a hipBLASLt solution index "
                        "for TransformerEngine",
                        hint="tune with hipblaslt-bench (imagebuild tune gemm --method "
                             "hipblaslt) or TunableOp on hipBLASLt; or run TE's own "
                             "tuning: imagebuild tune gemm --te -- CMD")
    path = bundle_dir / TE_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(te_file_text(entries, layout))
    tmp.replace(path)
    write_bundle(bundle_dir, replace(bundle, files=dict(bundle.files, te_algo=TE_FILE)))
    return path


# --- TE's reading rules, for checking a written file -------------------------------------

def read_te_file(text: str, devices: Iterable[int], layout: str = "2025",
                 hipblaslt_has_scale_modes: bool = True) -> tuple[list[TeEntry], list[str]]:
    """(entries TE keeps, what TE would print about the rest), reading as GemmAlgoCache's
    load_ does on a machine whose devices have the capabilities ``devices``. A name
    outside TE's tables is an error in TE; here a TuneError naming the line."""
    lines = text.split("\n")
    if lines[0] != LEGENDS[layout]:
        return [], [f"Incorrect algo storage legend. Expected {LEGENDS[layout]}"]
    caps = set(devices)
    kept: list[TeEntry] = []
    said: list[str] = []
    names = set(TE_TYPES.values())
    for number, raw in enumerate(lines[1:], start=2):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        cells = line.split(",")
        expected = len(LEGENDS[layout].split(","))
        if len(cells) != expected:
            return kept, [*said, f"Parsing CSV line failed: {line}"]
        if int(cells[0]) not in caps:
            continue
        fields = dict(zip(LEGENDS[layout].split(","), cells, strict=True))
        if int(fields["ws_min"]) > int(fields["ws_max"]):
            said.append(f"[WARNING] Invalid WS size at {line}")
            continue
        for column in ("type_a", "type_b", "type_d", "scale"):
            if fields[column] not in names:
                raise TuneError(f"line {number}: {column} {fields[column]!r}: TE raises "
                                "'Invalid ... name'")
        if fields["bias_type"] != "-" and fields["bias_type"] not in names:
            raise TuneError(f"line {number}: bias_type {fields['bias_type']!r} is not TE's")
        for column, allowed in (("trans_a", ("N", "T")), ("trans_b", ("N", "T")),
                                ("epi", EPILOGUES), ("comp", ("f32",))):
            if fields[column] not in allowed:
                raise TuneError(f"line {number}: {column} {fields[column]!r} is not TE's")
        if fields["scale"] != "float32":
            continue
        scale_mode = int(fields.get("fp8_scale", "0"))
        if scale_mode < 0 or (scale_mode != 0 and not hipblaslt_has_scale_modes):
            continue
        key = TeKey(int(fields["dev_cap"]), int(fields["m"]), int(fields["n"]),
                    int(fields["k"]), fields["trans_a"], fields["trans_b"], fields["type_a"],
                    fields["type_b"], fields["type_d"], fields["bias_type"],
                    int(fields["lda"]), int(fields["ldb"]), int(fields["ldd"]), scale_mode,
                    fields["epi"])
        entry = TeEntry(key, int(fields["ws_min"]), int(fields["ws_max"]),
                        int(fields["algo_id"]), int(fields["aidx"]))
        if lookup(kept, key, entry.ws_min, entry.ws_max) is not None:
            said.append("[WARNING] Duplicated/overlapped entry in algo cache")
            continue
        kept.append(entry)
    return kept, said


def lookup(entries: Iterable[TeEntry], key: TeKey, ws_min: int, ws_max: int | None = None
           ) -> TeEntry | None:
    """The entry TE uses for ``key`` at workspace ``ws_min`` (or one overlapping
    [ws_min, ws_max]): equal key, overlapping workspace range."""
    ws_max = ws_min if ws_max is None else ws_max
    for entry in entries:
        if entry.key == key and ws_min <= entry.ws_max and ws_max >= entry.ws_min:
            return entry
    return None
