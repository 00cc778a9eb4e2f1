"""Record the GEMMs of a run: a profiled step of the validation model here, or a user's
command under the recording each library offers.

- TunableOp (any torch >= 2.6 with a GPU): ``PYTORCH_TUNABLEOP_ENABLED=1
  PYTORCH_TUNABLEOP_TUNING=0 PYTORCH_TUNABLEOP_RECORD_UNTUNED=1`` writes
  ``tunableop_untuned<device>.csv`` in the working directory;
- hipBLASLt (ROCm): ``HIPBLASLT_LOG_MASK=32`` logs each GEMM as a hipblaslt-bench command
  (to stdout, or to ``HIPBLASLT_LOG_FILE``); an override file set at the same time turns
  the log off, so it is unset.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from .library_logs import problems_from_hipblaslt_log, problems_from_tunableop_csv
from .problems import ProblemError, ProblemStat, aggregate
from .trace import problems_from_trace

RECORD_ENV = {"PYTORCH_TUNABLEOP_ENABLED": "1", "PYTORCH_TUNABLEOP_TUNING": "0",
              "PYTORCH_TUNABLEOP_RECORD_UNTUNED": "1", "HIPBLASLT_LOG_MASK": "32"}


def record_local(workdir: Path, seq: int | None = None, layers: int | None = None) \
        -> tuple[list[ProblemStat], dict[str, Any]]:
    """Profile one training step of the validation model in this Python; CPU is fine.
    A GPU profiles 2 of Llama-3.1-8B's blocks, a CPU the 2-block proxy; either way the
    per-block GEMMs are scaled to the model's 32 blocks (step_problems.whole_model), so the
    ranking is over the whole model's step."""
    from dataclasses import replace

    try:
        import torch
    except ImportError:
        raise ProblemError("tune shapes --local: profiling a step needs torch, which this "
                           "Python lacks\nhint: run it in the image (imagebuild tune shapes "
                           "--local there), or use --model, --trace, --hipblaslt-log or "
                           "--tunableop here") from None

    from ..model.llama_config import LLAMA_3_1_8B, LLAMA_CPU_SMOKE
    from .shapes import profile_training_step
    from .step_problems import whole_model

    gpu = torch.cuda.is_available()
    config = LLAMA_3_1_8B.with_layers(2) if gpu else LLAMA_CPU_SMOKE
    if layers:
        config = replace(config, n_layers=layers)
    seq = seq or (8192 if gpu else 64)
    workdir.mkdir(parents=True, exist_ok=True)
    trace = workdir / "trace.json"
    info = profile_training_step(str(trace), config, seq)
    stats, summary = problems_from_trace(trace)
    model_layers = LLAMA_3_1_8B.n_layers
    stats = whole_model(stats, config, seq, model_layers)
    what = "reduced proxy of Llama-3.1-8B" if not gpu else "Llama-3.1-8B"
    return stats, {**info, **summary, "trace": str(trace),
                   "note": f"{what}: {config.n_layers} blocks profiled, per-block GEMMs "
                           f"scaled to {model_layers} (counts and times x"
                           f"{model_layers / config.n_layers:g}); the output projection "
                           "counted once"}


def record_command(command: list[str], workdir: Path) -> tuple[list[ProblemStat], dict]:
    """Run ``command`` in ``workdir`` with the recording variables; read what it left."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "hipblaslt_log.txt"
    env = dict(os.environ, **RECORD_ENV, HIPBLASLT_LOG_FILE=str(log),
               PYTORCH_TUNABLEOP_UNTUNED_FILENAME=str(workdir / "tunableop_untuned.csv"))
    env.pop("HIPBLASLT_TUNING_OVERRIDE_FILE", None)
    try:
        proc = subprocess.run(command, cwd=workdir, env=env, check=False,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise ProblemError(f"cannot run {command[0]}: {exc.strerror}") from exc
    (workdir / "command_output.txt").write_text(proc.stdout)
    if proc.returncode != 0:
        raise ProblemError(f"{' '.join(command)} exited with {proc.returncode}\n"
                        + "\n".join(proc.stdout.strip().splitlines()[-8:]))
    stats: list[ProblemStat] = []
    sources = []
    if "hipblaslt-bench" in proc.stdout:
        log.write_text(log.read_text() + proc.stdout if log.exists() else proc.stdout)
    if log.exists() and "hipblaslt-bench" in log.read_text(errors="replace"):
        stats += problems_from_hipblaslt_log(log)
        sources.append(str(log))
    elif untuned := sorted(workdir.glob("tunableop_untuned*.csv")):
        for path in untuned:
            stats += problems_from_tunableop_csv(path)
            sources.append(str(path))
    if not stats:
        raise ProblemError(f"{' '.join(command)}: recorded no GEMM (no hipBLASLt log line, no "
                        "TunableOp untuned file)\nhint: both need a GPU; on CPU use --local")
    return aggregate(stats), {"sources": sources}
