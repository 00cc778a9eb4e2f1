"""hipblaslt: the hipBLASLt clients the image was built with are present and run.

An image built with hipBLASLt from source (for offline GEMM tuning) records it in its
manifest (hipblaslt.enabled, hipblaslt.bench). The check runs one bf16 GEMM through
hipblaslt-bench on local rank 0 of each node and reads its CSV line
(``...,hipblaslt-Gflops,us`` header, then values). Its operands rotate through
``--rotating`` MiB, twice the GPU's last-level cache (gpus.json llc_mib), as the gemm
check's do: hipblaslt-bench's "Use rotating memory blocks for each iteration, size in MB"
(``hipblaslt-bench --help``, https://rocm.docs.amd.com/projects/hipBLASLt/en/latest/conceptual/hipblaslt-clients.html;
its tuning default is 512, twice MI300X's 256 MB Infinity Cache). A bench whose --help does
not list it runs without, and the figures say so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..check_context import Context
from ..image_manifest import section
from ..result import (
    INCOMPLETE,
    NO_GPU,
    NOT_APPLICABLE,
    CheckResult,
    below_minimum,
    failed,
    judge,
    skipped,
)

NAME = "hipblaslt"

BENCH_ARGS = ("-m", "4096", "-n", "4096", "-k", "4096", "--precision", "bf16_r",
              "--compute_type", "f32_r", "-i", "20", "-j", "5")
#: Rotate through this many times the last-level cache (as gemm.ROTATE_OVER_CACHE).
ROTATE_OVER_CACHE = 2
#: MI300X's Infinity Cache, for a GPU the table gives no cache size.
DEFAULT_LLC_BYTES = 256 * 2**20


def rotating_mib(llc_bytes: int) -> int:
    """--rotating's size in MiB: at least ROTATE_OVER_CACHE times the last-level cache."""
    return -(-ROTATE_OVER_CACHE * llc_bytes // 2**20)


def bench_args(llc_bytes: int, supports_rotating: bool) -> list[str]:
    rotating = ["--rotating", str(rotating_mib(llc_bytes))] if supports_rotating else []
    return [*BENCH_ARGS, *rotating]


def supports_rotating(bench: str, env: dict[str, str]) -> bool:
    """Whether this hipblaslt-bench lists --rotating in its --help."""
    try:
        proc = subprocess.run([bench, "--help"], capture_output=True, text=True, timeout=60,
                              env=env, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--rotating" in proc.stdout + proc.stderr


def parse_gflops(output: str) -> float | None:
    """The hipblaslt-Gflops value from hipblaslt-bench's CSV output."""
    lines = [line.strip() for line in output.splitlines()]
    for i, line in enumerate(lines):
        if "hipblaslt-Gflops" in line:
            header = [h.strip() for h in line.split(",")]
            column = header.index("hipblaslt-Gflops")
            for values in lines[i + 1:]:
                cells = [c.strip() for c in values.split(",")]
                if len(cells) == len(header):
                    try:
                        return float(cells[column])
                    except ValueError:
                        return None
    return None


def find_bench(ctx: Context) -> tuple[str | None, str]:
    """(path, where it came from); path None when there is nothing to run."""
    if ctx.options.hipblaslt_bench:
        return ctx.options.hipblaslt_bench, "--hipblaslt-bench"
    config = section(ctx.manifest, "hipblaslt")
    if config.get("enabled"):
        return str(config.get("bench") or ""), "manifest"
    found = shutil.which("hipblaslt-bench") or shutil.which(
        "hipblaslt-bench", path=os.path.join(os.environ.get("ROCM_PATH", "/opt/rocm"), "bin"))
    return found, "PATH"


def run(ctx: Context) -> CheckResult:
    config = section(ctx.manifest, "hipblaslt")
    bench, origin = find_bench(ctx)
    figures: dict[str, Any] = {"bench": bench, "from": origin, "commit": config.get("commit")}
    if ctx.mode != "gpu":
        return skipped(NAME, NO_GPU, "GPU-only: hipblaslt-bench needs an AMD GPU", figures)
    if ctx.gpu is None or ctx.gpu.vendor != "amd":
        return skipped(NAME, NOT_APPLICABLE, "hipBLASLt is ROCm-only; this GPU is not AMD",
                       figures)
    if ctx.manifest is not None and not config.get("enabled") and origin != "--hipblaslt-bench":
        return skipped(NAME, NOT_APPLICABLE,
                       "the image was built without hipBLASLt clients (manifest "
                       "hipblaslt.enabled is false)", figures)
    if not bench:
        if origin == "manifest":
            return failed(NAME, "manifest enables hipBLASLt but names no bench path", figures)
        return skipped(NAME, NOT_APPLICABLE, "no manifest and no hipblaslt-bench on PATH",
                       figures)
    if ctx.launch.local_rank != 0:
        return skipped(NAME, NOT_APPLICABLE, "run by local rank 0 of each node", figures)
    if not Path(bench).is_file():
        return failed(NAME, f"hipblaslt-bench not found at {bench} ({origin})", figures)
    if not os.access(bench, os.X_OK):
        return failed(NAME, f"{bench} is not executable", figures)
    env = dict(os.environ)
    # The bench runs on device 0 of what it sees: show it this rank's GPU only. HIP indices
    # count within HIP_VISIBLE_DEVICES when set (and within ROCR_VISIBLE_DEVICES below it).
    visible = [v for v in env.get("HIP_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if not visible:
        env["HIP_VISIBLE_DEVICES"] = str(ctx.gpu.index)
    elif ctx.gpu.index < len(visible):
        env["HIP_VISIBLE_DEVICES"] = visible[ctx.gpu.index]
    model = ctx.gpu_match.model if ctx.gpu_match else None
    llc = int(model.llc_mib * 2**20) if model and model.llc_mib else DEFAULT_LLC_BYTES
    rotating = supports_rotating(bench, env)
    argv = [bench, *bench_args(llc, rotating)]
    figures["argv"] = argv
    figures["last_level_cache_bytes"] = llc
    figures["operands"] = (f"rotated through {rotating_mib(llc)} MiB (--rotating), "
                           f"{ROTATE_OVER_CACHE}x the last-level cache" if rotating else
                           "reused every iteration: this hipblaslt-bench has no --rotating, "
                           "so they may stay in cache and the figure read high")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env,
                              check=False)
    except subprocess.TimeoutExpired:
        return failed(NAME, f"{bench} did not finish in 300 s", figures)
    except OSError as exc:
        return failed(NAME, f"{bench} cannot run: {exc.strerror}", figures)
    output = proc.stdout + proc.stderr
    tail = tuple(output.strip().splitlines()[-8:])
    if proc.returncode != 0:
        return failed(NAME, f"{bench} exited with {proc.returncode}", figures, tail)
    gflops = parse_gflops(proc.stdout)
    if gflops is None:
        return failed(NAME, f"{bench} printed no hipblaslt-Gflops result", figures, tail)
    return evaluate(gflops / 1e3, ctx.peak_tflops, ctx.thresholds, bench, figures)


def evaluate(tflops: float, peak: float | None, thresholds: dict[str, float], bench: str,
             figures: dict[str, Any]) -> CheckResult:
    """The bench's figure against ``hipblaslt_min_fraction`` of the peak: a bench that runs
    but at a fraction of what the library should do is as broken as one that does not."""
    figures = {**figures, "tflops": round(tflops, 2), "peak_tflops": peak}
    what = f"{bench} ran a bf16 4096^3 GEMM at {tflops:.1f} TFLOP/s"
    if not peak:
        return skipped(NAME, INCOMPLETE, f"{what}, but this GPU is not in the peak table: "
                       "pass --peak-tflops to judge it", figures)
    fraction = tflops / peak
    minimum = thresholds["hipblaslt_min_fraction"]
    figures.update(fraction_of_peak=round(fraction, 4), min_fraction=minimum)
    low = below_minimum("hipblaslt-bench bf16 GEMM", fraction * 100, minimum * 100, "% of peak",
                        f"{tflops:.1f} of {peak:g} TFLOP/s")
    return judge(NAME, [low] if low else [], f"{what} = {fraction:.0%} of {peak:g} peak",
                 figures)
