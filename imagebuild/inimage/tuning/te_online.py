"""``imagebuild tune gemm --te CMD``: run CMD with TransformerEngine's own online GEMM
tuning and keep the file TE saves in the bundle, so later runs load it.

TE on ROCm (ROCm/TransformerEngine README.rst, "GEMM tuning with hipBLASLt";
transformer_engine/common/gemm/rocm_gemm.cu): with ``TE_HIPBLASLT_TUNING_RUN_COUNT`` > 0 it
times up to ``TE_HIPBLASLT_TUNING_ALGO_COUNT`` heuristic candidates of each new GEMM that
many times and keeps the fastest; ``TE_HIPBLASLT_ALGO_SAVE`` names the CSV it rewrites
(truncated, then every entry) whenever it learns one, and ``TE_HIPBLASLT_ALGO_LOAD`` the one
it reads at start. The README's recipe: one iteration with RUN_COUNT 20 and ALGO_COUNT 400,
saved, then loaded. Here TE saves to a temporary name in the bundle, loading the bundle's
current file when there is one so a second command extends it; only a command that exits
0 and leaves a file with TE's legend replaces the bundle's file. Run one process: ranks of
one job would each rewrite the same file.

Standard library only; the command brings TE (and a GPU).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

from .bundle_format import BUNDLE_FILE, Bundle, read_bundle, write_bundle
from .problems import ProblemError

TE_FILE = "te_hipblaslt_algos.csv"
#: TE's README recipe for one tuning iteration.
DEFAULT_RUN_COUNT = 20
DEFAULT_ALGO_COUNT = 400
#: The first word of TE's legend, whatever its layout (rocm_gemm.cu header_).
LEGEND_START = "dev_cap,m,n,k,"
#: Variables that would change what TE tunes or where it saves: set here, or removed.
TE_VARIABLES = ("TE_HIPBLASLT_TUNING_RUN_COUNT", "TE_HIPBLASLT_TUNING_ALGO_COUNT",
                "TE_HIPBLASLT_ALGO_SAVE", "TE_HIPBLASLT_ALGO_LOAD",
                "TE_HIPBLASLT_ALGO_SELECTION")


def te_tuning_env(base: dict[str, str], save: Path, load: Path | None, run_count: int,
                  algo_count: int) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in TE_VARIABLES}
    env.update(TE_HIPBLASLT_TUNING_RUN_COUNT=str(run_count),
               TE_HIPBLASLT_TUNING_ALGO_COUNT=str(algo_count),
               TE_HIPBLASLT_ALGO_SAVE=str(save))
    if load is not None:
        env["TE_HIPBLASLT_ALGO_LOAD"] = str(load)
    return env


def run_te_tuning(command: list[str], out: Path, new_bundle: Bundle | None = None,
                  run_count: int = DEFAULT_RUN_COUNT, algo_count: int = DEFAULT_ALGO_COUNT
                  ) -> tuple[Path, int]:
    """Run ``command`` with TE's tuning on; (the bundle's TE file, its entry rows). The
    bundle is ``out`` (its tuning.json), or ``new_bundle`` written there when it has none."""
    if not command:
        raise ProblemError("tune gemm --te: no command\nhint: --te 'python train.py ...'")
    bundle = read_bundle(out) if (out / BUNDLE_FILE).is_file() else new_bundle
    if bundle is None:
        raise ProblemError(f"{out}: no {BUNDLE_FILE} and no GPU facts to start a bundle "
                           "with\nhint: run it in the image on the GPU it tunes for")
    out.mkdir(parents=True, exist_ok=True)
    final = out / TE_FILE
    partial = out / (TE_FILE + ".partial")
    partial.unlink(missing_ok=True)
    current = out / bundle.files["te_algo"] if "te_algo" in bundle.files else None
    env = te_tuning_env(dict(os.environ), partial, current, run_count, algo_count)
    try:
        proc = subprocess.run(command, env=env, check=False)
    except OSError as exc:
        raise ProblemError(f"cannot run {command[0]}: {exc.strerror}") from exc
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ProblemError(f"{' '.join(command)} exited with {proc.returncode}; the bundle "
                           "is unchanged")
    text = partial.read_text(errors="replace") if partial.is_file() else ""
    rows = [line for line in text.splitlines()[1:] if line.strip()
            and not line.startswith("#")]
    if not text.startswith(LEGEND_START) or not rows:
        partial.unlink(missing_ok=True)
        raise ProblemError(f"{' '.join(command)}: TransformerEngine saved no tuned GEMM "
                           f"to TE_HIPBLASLT_ALGO_SAVE\nhint: the command must run TE "
                           "GEMMs on ROCm (TE prints 'Saving autotune results to ...')")
    partial.replace(final)
    write_bundle(out, replace(bundle, files=dict(bundle.files, te_algo=TE_FILE)))
    return final, len(rows)
