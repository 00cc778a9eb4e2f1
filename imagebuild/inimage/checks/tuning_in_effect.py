"""tuning: is a tuning bundle in effect here? GEMMs of its problems without and with it.

Runs when the runner gets ``--tuning DIR`` (where it sees the bundle; ``imagebuild validate
--tuning DIR`` mounts it at /opt/imagebuild/tuning and sets the variables that load it for
the whole run).

1. Match: the bundle's ``tuning.json`` against this image and GPU (recipe and hipBLASLt
   commit from the image manifest, torch version, GPU architecture and CU count). A field
   that differs fails the check and is named: the libraries would ignore the files
   silently (tuning/bundle_format.py's docstring has why). Runs on CPU too.
2. Compare (GPU): two child processes on this rank's GPU, one with every tuning variable
   removed, one with the bundle's set. A process either has them or not: hipBLASLt reads
   its override file once (inside hipblasLtMatmulAlgoGetHeuristic), TunableOp its results
   file on first use. Each child times every problem (torch.mm / torch.bmm on operands laid
   out as the problem says, the loop calibrated as the gemm check's) and names the kernels
   that ran (torch.profiler's device events), and the second says what TunableOp loaded.
3. Verdict (tuning/verify.py's judge): in effect when no library said it ignored a file, the
   override file's ``Git Version`` is the loaded hipBLASLt's, a problem changed its
   kernel (or, kernels unknown, got faster beyond noise), and no problem got slower beyond
   the noise of its REPEATS timings (verify.py's docstring defines it).

Rank 0 measures on its GPU (one comparison per job); the other ranks only match.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..result import (
    NO_GPU,
    NOT_APPLICABLE,
    CheckResult,
    failed,
    merge_global,
    passed,
    skipped,
)
from ..tuning.bundle_format import (
    TUNING_VARIABLES,
    Bundle,
    Target,
    mismatches,
    only_defaults,
    read_bundle,
    tuning_env,
)
from ..tuning.problems import GemmProblem, ProblemError
from ..tuning.verify import (
    Measurement,
    ProblemComparison,
    git_version_mismatch,
    judge,
    table,
    taf_figures,
)

NAME = "tuning"
#: This module, run in a child process to measure with a bundle's variables set.
MODULE = "tuning_in_effect"
#: Seconds each timed loop aims at (as the gemm check), and timed loops per problem.
TARGET_S = 0.05
REPEATS = 3
#: A child (all problems, one setting) gets this long before it counts as hung.
CHILD_TIMEOUT_S = 900
_DTYPES = {"bf16_r": "bfloat16", "f16_r": "float16", "f32_r": "float32", "f64_r": "float64"}


# --- host of the comparison (the check's own process) ---------------------------------------

def target_here(manifest: dict[str, Any] | None, device_index: int | None) -> Target:
    """What this process knows about where the bundle would apply."""
    import torch

    from ..image_manifest import section
    from ..tuning.gemm_tuner import gpu_facts

    hip = section(manifest, "hipblaslt")
    facts = gpu_facts(device_index) if device_index is not None else {"gpu": None}
    return Target(image_digest=os.environ.get("IMAGEBUILD_IMAGE_DIGEST") or None,
                  hipblaslt_git_version=str(hip["commit"]) if hip.get("enabled")
                  and hip.get("commit") else None,
                  torch_version=torch.__version__,
                  gpu_arch=facts.get("arch"), cu_count=facts.get("cu_count"),
                  recipe=str((manifest or {}).get("recipe") or "") or None)


def bundle_figures(directory: Path, bundle: Bundle, target: Target) -> dict[str, Any]:
    """What the report says about the bundle and the run's own environment."""
    wanted = tuning_env(bundle, str(directory))
    return {"bundle": str(directory), "recipe": bundle.recipe, "torch": bundle.torch_version,
            "hipblaslt_git_version": bundle.hipblaslt_git_version,
            "gpu_arch": bundle.gpu_arch, "cu_count": bundle.cu_count,
            "files": dict(bundle.files), "problems": len(bundle.problems),
            "matched_against": {k: v for k, v in vars(target).items() if v},
            "env": wanted,
            # Whether the rest of this run (gemm, train) ran with the bundle: the launcher
            # sets these for the whole container.
            "run_env_loads_bundle": all(os.environ.get(k) == v for k, v in wanted.items()),
            "run_env": {k: os.environ[k] for k in TUNING_VARIABLES if k in os.environ}}


def child_env(bundle: Bundle | None, directory: Path) -> dict[str, str]:
    """This process's environment without any tuning variable, plus the bundle's when
    given; the checks importable."""
    from ..package_path import package_root

    env = {k: v for k, v in os.environ.items() if k not in TUNING_VARIABLES}
    env.pop("PYTORCH_TUNABLEOP_RECORD_UNTUNED", None)
    if bundle is not None:
        env.update(tuning_env(bundle, str(directory)))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(package_root()), env.get("PYTHONPATH", "")) if p)
    return env


def measure_in_child(problems: list[dict[str, Any]], device: str, env: dict[str, str],
                     workdir: Path, label: str) -> tuple[dict[str, Any], str]:
    """(the child's figures, its stdout+stderr) for one setting."""
    request = workdir / f"tuning-{label}-in.json"
    answer = workdir / f"tuning-{label}-out.json"
    request.write_text(json.dumps({"problems": problems, "device": device,
                                   "target_s": TARGET_S, "repeats": REPEATS}))
    answer.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-m", f"{__package__}.{MODULE}", "measure",
                           str(request), str(answer)], env=env, capture_output=True,
                          text=True, timeout=CHILD_TIMEOUT_S, check=False)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 or not answer.is_file():
        tail = " | ".join(output.strip().splitlines()[-4:])
        raise RuntimeError(f"the {label} measurement exited with {proc.returncode}: {tail}")
    return json.loads(answer.read_text()), output


def compare(directory: Path, bundle: Bundle, device: str, workdir: Path
            ) -> tuple[list[ProblemComparison], dict[str, Any], list[str], str]:
    """Measure without, then with the bundle: (rows, what the "with" child found about the
    libraries, reasons it is not in effect found here, the "with" child's output)."""
    problems: list[dict[str, Any]] = [
        {"m": p.m, "n": p.n, "k": p.k, "batch_count": p.batch_count,
         "transA": p.transA, "transB": p.transB, "a_type": p.a_type}
        for p in bundle.problems]
    before, _ = measure_in_child(problems, device, child_env(None, directory), workdir,
                                 "without")
    after, output = measure_in_child(problems, device, child_env(bundle, directory),
                                     workdir, "with")
    rows = []
    for spec, b, a in zip(problems, before["rows"], after["rows"], strict=True):
        problem = GemmProblem(spec["m"], spec["n"], spec["k"], spec["batch_count"],
                              spec["transA"], spec["transB"], spec["a_type"], spec["a_type"],
                              spec["a_type"], spec["a_type"])
        rows.append(ProblemComparison(
            problem, Measurement(b["us"], _kernel(b), tuple(b.get("samples_us") or ())),
            Measurement(a["us"], _kernel(a), tuple(a.get("samples_us") or ()))))
    reasons = []
    name = bundle.files.get("hipblaslt_override")
    revision = after.get("hipblaslt_git_version")
    if name and revision:
        first_line = (directory / name).read_text(errors="replace").partition("\n")[0]
        reasons.append(git_version_mismatch(first_line, revision))
    if "tunableop" in bundle.files and not (after.get("tunableop") or {}).get("loaded"):
        reasons.append("TunableOp loaded no result from "
                       f"{tuning_env(bundle, str(directory))['PYTORCH_TUNABLEOP_FILENAME']}")
    extra = {"hipblaslt_library": after.get("hipblaslt_library"),
             "hipblaslt_library_git_version": revision,
             "tunableop": after.get("tunableop"),
             "env_without": before.get("env"), "env_with": after.get("env")}
    return rows, extra, [r for r in reasons if r], output


def _kernel(row: dict[str, Any]) -> str | None:
    kernels = row.get("kernels")
    return "+".join(kernels) if kernels else None


def problem_figures(rows: list[ProblemComparison], tunableop: dict[str, Any] | None
                    ) -> list[dict[str, Any]]:
    solutions = (tunableop or {}).get("solutions") or {}
    out = []
    for i, r in enumerate(rows):
        p = r.problem
        out.append({"m": p.m, "n": p.n, "k": p.k, "batch_count": p.batch_count,
                    "transA": p.trans_a, "transB": p.trans_b, "a_type": p.a_type,
                    "before_us": round(r.before.us, 3), "after_us": round(r.after.us, 3),
                    "before_tflops": round(r.tflops_before, 3),
                    "after_tflops": round(r.tflops_after, 3), "speedup": round(r.speedup, 4),
                    "kernel_before": r.before.solution, "kernel_after": r.after.solution,
                    "kernel_changed": r.kernel_changed,
                    "noise": round(r.noise, 4), "slower": r.slower,
                    "tunableop_solution": solutions.get(str(i))})
    return out


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def evaluate(directory: Path, manifest: dict[str, Any] | None, device_index: int | None,
             workdir: Path) -> tuple[str, str, dict[str, Any]]:
    """(status, reason, figures) for the bundle in ``directory`` here; device_index None:
    no GPU (match only)."""
    try:
        bundle = read_bundle(directory)
    except ProblemError as exc:
        return "failed", str(exc).replace("\n", "; "), {"bundle": str(directory)}
    target = target_here(manifest, device_index)
    figures = bundle_figures(directory, bundle, target)
    differing = mismatches(bundle, target)
    if differing:
        figures["mismatches"] = differing
        return "failed", ("the bundle does not match: " + "; ".join(
            line.split(" -- ")[0] for line in differing)), figures
    known = figures["matched_against"]
    matched = ", ".join(f"{k} {known[k]}" for k in ("recipe", "torch_version",
                                                    "hipblaslt_git_version") if k in known)
    if device_index is None:
        loads = "this run's environment loads it" if figures["run_env_loads_bundle"] \
            else "this run's environment does not load it"
        return ("skipped", (f"GPU-only: GEMMs without and with the bundle "
                            f"({len(bundle.problems)} problems) need a GPU; it matches "
                            f"({matched or 'nothing known to compare'}) and {loads}"), figures)
    rows, extra, reasons, output = compare(directory, bundle, f"cuda:{device_index}",
                                           workdir)
    if (nothing := only_defaults(directory, bundle)) is not None:
        reasons = [nothing, *reasons]  # the reason no kernel changes, before that finding
    verdict = judge(rows, output, more_reasons=reasons)
    figures.update(extra)
    figures["per_problem"] = problem_figures(rows, extra.get("tunableop"))
    figures["speedup_geomean"] = round(geomean([r.speedup for r in rows]) or 0.0, 4)
    figures.update(taf_figures(rows))
    figures["kernels_changed"] = sum(1 for r in rows if r.kernel_changed)
    figures["in_effect"] = verdict.ok
    figures["reasons"] = list(verdict.reasons)
    figures["table"] = table(verdict)
    summary = (f"{len(rows)} problems of {directory}: {figures['kernels_changed']} changed "
               f"kernel, geometric-mean speed-up {figures['speedup_geomean']:.3f}x")
    if verdict.ok:
        return "passed", f"tuning in effect: {summary}", figures
    return "failed", f"tuning NOT in effect ({'; '.join(verdict.reasons)}): {summary}", figures


def verify_here(directory: Path) -> tuple[str, str, dict[str, Any]]:
    """``imagebuild tune verify``: evaluate on this process's GPU (device 0), if any."""
    import torch

    from ..image_manifest import load_manifest
    from ..options import DEFAULT_MANIFEST, MANIFEST_ENV

    manifest, _ = load_manifest(os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST)
    with tempfile.TemporaryDirectory(prefix="imagebuild-tune-verify-") as tmp:
        return evaluate(directory.resolve(), manifest, 0 if torch.cuda.is_available() else None,
                        Path(tmp))


def run(ctx: Any) -> CheckResult:
    directory = getattr(ctx.options, "tuning", None)
    if not directory:
        return skipped(NAME, NOT_APPLICABLE, "no tuning bundle given (--tuning DIR)")
    gpu = ctx.mode == "gpu" and ctx.rank == 0
    status, reason, figures = evaluate(Path(directory).resolve(), ctx.manifest,
                                       ctx.device.index if gpu else None, ctx.workdir)
    if status == "failed":
        return failed(NAME, reason, figures, tuple(figures.get("table", ())))
    if status == "passed":
        return passed(NAME, reason, figures, tuple(figures.get("table", ())))
    if ctx.mode == "gpu":
        return skipped(NAME, NOT_APPLICABLE, "measured on rank 0; the bundle matches here",
                       figures)
    return skipped(NAME, NO_GPU, reason, figures)


def merge(results: list[CheckResult], ctx: Any) -> CheckResult:
    return merge_global(results, ctx.hosts)


# --- the child: one setting, every problem ---------------------------------------------------

def _operands(spec: dict[str, Any], device: Any) -> tuple[Any, Any, Any]:
    """Row-major operands of a column-major problem: hipBLASLt's A is mat2 and its B is
    mat1 (tuning/torch_ops.py's docstring), so out[n, m] = op(mat1)[n, k] @ op(mat2)[k, m], mat1 a
    transposed view when transB is T and mat2 one when transA is T."""
    import torch

    dtype = getattr(torch, _DTYPES[spec["a_type"]])
    rows, cols, inner, batch = spec["n"], spec["m"], spec["k"], spec["batch_count"]

    def make(shape: tuple[int, int], transposed: bool) -> Any:
        stored = (batch, shape[1], shape[0]) if transposed else (batch, *shape)
        tensor = torch.randn(stored, device=device, dtype=dtype)
        return tensor.transpose(-1, -2) if transposed else tensor

    mat1 = make((rows, inner), spec["transB"] == "T")
    mat2 = make((inner, cols), spec["transA"] == "T")
    out = torch.empty(batch, rows, cols, device=device, dtype=dtype)
    if batch == 1:
        return mat1[0], mat2[0], out[0]
    return mat1, mat2, out


def _kernels(step: Any, device: Any) -> list[str] | None:
    """Device kernels one call runs (profiler), without copies and fills; None when the
    profiler gives no device events (CPU, or no kernel tracing here)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device.type != "cuda":
        return None
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize(device)
        names = sorted({e.name for e in prof.events()
                        if e.device_type == torch.autograd.DeviceType.CUDA
                        and not any(w in e.name.lower() for w in ("memcpy", "memset"))})
    except Exception:  # noqa: BLE001 - a profiler without device tracing: kernels unknown
        return None
    return names or None


def _tunableop_state(lines: list[str]) -> dict[str, Any] | None:
    """What TunableOp holds after the run: how many results it loaded, and the solution
    of each measured problem (by index), when TunableOp is on."""
    try:
        from torch.cuda import tunable

        if not tunable.is_enabled():
            return None
        results = tunable.get_results()
    except (AttributeError, RuntimeError):
        return None
    from ..tuning.gemm_tuner import tunableop_result

    solutions = {}
    for index, line in enumerate(lines):
        found = tunableop_result(line, results)
        if found is not None:
            solutions[str(index)] = found[0]
    return {"loaded": len(results), "solutions": solutions,
            "filename": tunable.get_filename()}


def _hipblaslt_library() -> tuple[str | None, str | None]:
    """(path, git revision) of the libhipblaslt this process loaded, asked through its own
    API (hipblasLtCreate, hipblasLtGetGitRevision: hipBLASLt's hipblaslt.h); (None, None)
    when none is loaded or the call fails."""
    import ctypes

    try:
        with open("/proc/self/maps") as handle:
            paths = {line.split()[-1] for line in handle if "libhipblaslt" in line
                     and line.split()[-1].startswith("/")}
    except OSError:
        return None, None
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
            handle_ = ctypes.c_void_p()
            if library.hipblasLtCreate(ctypes.byref(handle_)) != 0:
                continue
            buffer = ctypes.create_string_buffer(256)
            status = library.hipblasLtGetGitRevision(handle_, buffer)
            library.hipblasLtDestroy(handle_)
            if status == 0 and buffer.value:
                return path, buffer.value.decode(errors="replace").strip()
        except (OSError, AttributeError):
            continue
    return (min(paths) if paths else None), None


def measure(request: dict[str, Any]) -> dict[str, Any]:
    """Time every problem and name its kernels, in this process's setting."""
    import torch

    from ..timing import calibrated_time
    from ..tuning.bench import tunableop_line

    device = torch.device(request["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    rows = []
    for spec in request["problems"]:
        mat1, mat2, out = _operands(spec, device)
        multiply = torch.mm if mat1.dim() == 2 else torch.bmm

        def step(mat1: Any = mat1, mat2: Any = mat2, out: Any = out,
                 multiply: Any = multiply) -> None:
            multiply(mat1, mat2, out=out)

        samples = [calibrated_time(step, device, warmup=3, target_s=request["target_s"],
                                   min_iters=5, max_iters=200)[0]
                   for _ in range(request["repeats"])]
        rows.append({"us": sorted(samples)[len(samples) // 2] * 1e6,
                     "samples_us": [t * 1e6 for t in samples],
                     "kernels": _kernels(step, device)})
        del mat1, mat2, out
    lines = [tunableop_line({k: str(v) for k, v in spec.items()} | {
        "b_type": spec["a_type"], "c_type": spec["a_type"], "d_type": spec["a_type"]})
        for spec in request["problems"]]
    library, revision = _hipblaslt_library()
    return {"rows": rows, "tunableop": _tunableop_state(lines), "hipblaslt_library": library,
            "hipblaslt_git_version": revision, "torch": torch.__version__,
            "env": {k: os.environ[k] for k in TUNING_VARIABLES if k in os.environ}}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 3 or argv[0] != "measure":
        print(f"usage: python -m {__package__}.{MODULE} measure REQUEST.json OUT.json",
              file=sys.stderr)
        return 2
    figures = measure(json.loads(Path(argv[1]).read_text()))
    Path(argv[2]).write_text(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
