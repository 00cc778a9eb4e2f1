"""megatron: the users' workload, Megatron-LM's ``pretrain_gpt.py`` from the image.

GPU: every rank of the validation job starts one Megatron rank of its own (same rank, world
size and GPU, a fresh rendezvous port), so every launcher works, sbatch across nodes
included. The run is Llama-3.1-8B's architecture with the blocks, sequence, micro-batch and
activation checkpointing the FSDP2 train step plans (the same workload, so the two are
compared like for like), the ReFrame check's arguments where they apply
(model/megatron_run.py), mock data and a few iterations. Megatron's own output is parsed:
elapsed time per iteration, TFLOP/s/GPU, lm loss, and the ``[exiting program at iteration
N]`` line the ReFrame check requires. ``--megatron-fp8`` runs its FP8 variant, reported
as fp8 and never judged against bf16 figures or the bf16 peak.

CPU: Megatron cannot iterate without a GPU, so the check proves what a CPU can
(model/megatron_probe.py): the GPU argument list parses and validates with the image's
Megatron, and a reduced-width GPTModel of the same architecture builds on CPU. Reported as
a CPU probe, with no figures of speed.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ..check_context import Context
from ..job_rank import free_port
from ..log_signatures import errors, scan
from ..model.llama import LLAMA_3_1_8B, LLAMA_CPU_SMOKE, LlamaConfig
from ..model.loss_curve import falls
from ..model.megatron_run import (
    MEGATRON_ENV,
    Architecture,
    MegatronRun,
    TrainingLog,
    cpu_arguments,
    figures_of,
    parse_training_log,
    pretrain_arguments,
)
from ..package_path import package_root
from ..result import (
    NOT_APPLICABLE,
    CheckResult,
    below_minimum,
    failed,
    judge,
    merge_global,
    skipped,
)

NAME = "megatron"
#: The world size the CPU probe validates the GPU arguments for.
CPU_PROBE_WORLD = 8
#: Megatron's output kept in a failure's details.
TAIL_LINES = 25


def architecture(config: LlamaConfig) -> Architecture:
    return Architecture(layers=config.n_layers, hidden=config.dim, ffn_hidden=config.ffn_dim,
                        heads=config.n_heads, kv_groups=config.n_kv_heads,
                        vocab=config.vocab_size, rope_base=config.rope_theta,
                        norm_eps=config.norm_eps)


def megatron_dir(ctx: Context) -> Path | None:
    configured = ctx.options.megatron_dir or os.environ.get("MEGATRON_LM_DIR")
    return Path(configured) if configured else None


def run(ctx: Context) -> CheckResult:
    directory = megatron_dir(ctx)
    if directory is None:
        return skipped(NAME, NOT_APPLICABLE, "no Megatron-LM in this image (MEGATRON_LM_DIR is "
                       "unset; a recipe's megatron section installs it), and no --megatron-dir")
    if not (directory / "pretrain_gpt.py").is_file():
        return failed(NAME, f"{directory}/pretrain_gpt.py does not exist (MEGATRON_LM_DIR or "
                      "--megatron-dir must name a Megatron-LM checkout)")
    if ctx.mode != "gpu":
        return _cpu_probe(ctx, directory)
    return _gpu_run(ctx, directory)


def _child_env(extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ, **MEGATRON_ENV, **extra)
    # The in-image package importable in Megatron's process too (the CPU probe runs from it).
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(package_root()), env.get("PYTHONPATH", "")) if p)
    return env


def _tail(text: str) -> tuple[str, ...]:
    return tuple(text.splitlines()[-TAIL_LINES:])


def _cpu_probe(ctx: Context, directory: Path) -> CheckResult:
    if ctx.rank != 0:  # one probe per job: it is the same on every rank
        return skipped(NAME, NOT_APPLICABLE, "CPU probe runs on rank 0")
    # The full model's GPU arguments as for one 8-GPU node (MI250X GCDs, MI300X).
    gpu_run = _plan(ctx, LLAMA_3_1_8B, seq=8192, layers=LLAMA_3_1_8B.n_layers,
                    ac="none", world_size=CPU_PROBE_WORLD)
    small = _plan(ctx, LLAMA_CPU_SMOKE, seq=LLAMA_CPU_SMOKE.max_seq_len,
                  layers=LLAMA_CPU_SMOKE.n_layers, ac="none", world_size=1)
    request = {"gpu_args": pretrain_arguments(gpu_run),
               "cpu_args": cpu_arguments(pretrain_arguments(small)),
               "gpu_world_size": gpu_run.world_size, "megatron_dir": str(directory),
               "env": MEGATRON_ENV}
    path = ctx.workdir / "megatron-probe.json"
    path.write_text(json.dumps(request))
    package = __package__.rsplit(".", 1)[0]
    done = subprocess.run([sys.executable, "-m", f"{package}.model.megatron_probe", str(path)],
                          env=_child_env({}), capture_output=True, text=True,
                          timeout=ctx.options.megatron_timeout, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return failed(NAME, f"the CPU probe of {directory} failed (exit {done.returncode}): "
                      f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}",
                      {"arguments": request["gpu_args"]}, details=_tail(done.stderr))
    found = json.loads(lines[-1])
    model = found["cpu_model"]
    figures = {"workload": "cpu-probe", "megatron": found["megatron"],
               "gpu_arguments": {**found["gpu_arguments"], "arguments": request["gpu_args"]},
               "cpu_model": model, "warnings": found["warnings"],
               "configuration": gpu_run.to_dict()}
    return judge(NAME, [], (
        f"CPU probe, no training: Megatron {found['megatron']['version']} at {directory} "
        f"parsed and validated the GPU argument list ({found['gpu_arguments']['count']} "
        f"arguments, transformer_impl {found['gpu_arguments']['transformer_impl']}) and built "
        f"a {model['layers']}-layer GPTModel of the same architecture at width "
        f"{model['hidden']} on CPU ({model['parameters']:,} parameters); an iteration needs a "
        "GPU"), figures)


def _plan(ctx: Context, base: LlamaConfig, *, seq: int, layers: int, ac: str,
          world_size: int) -> MegatronRun:
    opts = ctx.options
    return MegatronRun(
        model=architecture(replace(base, n_layers=layers)), seq=seq, world_size=world_size,
        tensor_parallel=opts.megatron_tp, micro_batch=opts.train_batch,
        iterations=opts.megatron_warmup + opts.megatron_iterations,
        precision="fp8" if opts.megatron_fp8 else "bf16", activation_checkpointing=ac,
        tokenizer_model=opts.megatron_tokenizer_model,
        transformer_impl=opts.megatron_transformer_impl)


def _gpu_plan(ctx: Context) -> tuple[MegatronRun, dict[str, Any]]:
    """The FSDP2 step's plan (blocks, sequence, checkpointing) for the same ranks."""
    from .train import choose_plan

    opts = ctx.options
    seq = opts.train_seq or 8192
    base = replace(LLAMA_3_1_8B, max_seq_len=seq)
    plan = choose_plan(ctx, base, seq, opts.train_batch)
    ac = plan.activation_checkpointing
    run = _plan(ctx, LLAMA_3_1_8B, seq=seq, layers=max(plan.layers, 1),
                ac=ac if ac in ("none", "full", "selective") else "full",
                world_size=ctx.world_size)
    return run, plan.to_dict()


def _gpu_run(ctx: Context, directory: Path) -> CheckResult:
    opts = ctx.options
    if ctx.world_size % opts.megatron_tp:
        return failed(NAME, f"--megatron-tp {opts.megatron_tp} does not divide the "
                      f"{ctx.world_size} ranks")
    if opts.megatron_transformer_impl == "transformer_engine" and \
            importlib.util.find_spec("transformer_engine") is None:
        return failed(NAME, f"{sys.executable} cannot import transformer_engine, which the "
                      "ReFrame check's run uses (--transformer-impl transformer_engine): the "
                      "image lacks TransformerEngine; --megatron-transformer-impl local runs "
                      "Megatron's torch layers instead (a different workload, reported as such)")
    if opts.megatron_fp8 and opts.megatron_transformer_impl != "transformer_engine":
        return failed(NAME, "--megatron-fp8 needs --megatron-transformer-impl "
                      "transformer_engine (FP8 GEMMs are TransformerEngine's)")
    run, plan = _gpu_plan(ctx)
    return judge_run(ctx, run, plan, launch(ctx, directory, pretrain_arguments(run)))


def launch(ctx: Context, directory: Path, arguments: list[str]) -> list[dict[str, Any]]:
    """Run one Megatron rank beside this rank (its rank, world size and device, a new
    rendezvous port), its output in the work directory; every rank's exit code, parsed log
    and last lines, in rank order."""
    port = ctx.all_gather_object(free_port() if ctx.rank == 0 else None, tag="megatron-port")[0]
    master = os.environ.get("MASTER_ADDR") or (ctx.hosts[0] if ctx.hosts else "127.0.0.1")
    gc.collect()
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()  # leave the GPU to Megatron's rank
    log_path = ctx.workdir / f"megatron-rank{ctx.rank}.log"
    env = _child_env({"RANK": str(ctx.rank), "WORLD_SIZE": str(ctx.world_size),
                      "LOCAL_RANK": str(ctx.device.index or 0), "MASTER_ADDR": master,
                      "MASTER_PORT": str(port)})
    ctx.barrier()
    code: int | None
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            code = subprocess.run([sys.executable, str(directory / "pretrain_gpt.py"),
                                   *arguments], env=env, stdout=log, stderr=subprocess.STDOUT,
                                  timeout=ctx.options.megatron_timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            code = None
    text = log_path.read_text(encoding="utf-8", errors="replace")
    mine = {"rank": ctx.rank, "code": code, "log": parse_training_log(text).to_dict(),
            "tail": _tail(text), "path": str(log_path),
            "signatures": scan(text.splitlines())}
    return ctx.all_gather_object(mine, tag="megatron-logs")


def judge_run(ctx: Context, run: MegatronRun, plan: dict[str, Any],
              everyone: list[dict[str, Any]]) -> CheckResult:
    setup = {**run.to_dict(), "arguments": pretrain_arguments(run), "train_plan": plan,
             "workload": "full" if run.model.layers == LLAMA_3_1_8B.n_layers else "proxy",
             "logs": [r["path"] for r in everyone]}
    signatures = {str(r["rank"]): r.get("signatures") or {} for r in everyone}
    named = [f"rank {rank}: {line}" for rank, found in signatures.items()
             for line in errors(found)]
    broken = [r for r in everyone if r["code"] != 0]
    if broken:
        first = broken[0]
        what = (f"timed out after {ctx.options.megatron_timeout} s" if first["code"] is None
                else f"exited {first['code']}")
        why = f"; its log says {named[0]}" if named else ""
        return failed(NAME, f"Megatron rank {first['rank']} {what} "
                      f"({len(broken)} of {len(everyone)} ranks failed){why}; its log: "
                      f"{first['path']}", {"configuration": setup, "log_signatures": signatures},
                      details=tuple(first["tail"]))
    logs = [r["log"] for r in everyone]
    iterations = max((log["iterations"] for log in logs), key=len)
    exited = next((log["exited_at"] for log in logs if log["exited_at"] is not None), None)
    try:
        figures = figures_of(TrainingLog(iterations, exited), run, ctx.options.megatron_warmup)
    except ValueError as exc:
        return failed(NAME, f"{exc} (log: {everyone[-1]['path']})", {"configuration": setup},
                      details=tuple(everyone[-1]["tail"]))
    figures.update(configuration=setup, workload=setup["workload"], precision=run.precision,
                   log_signatures=signatures)
    result = evaluate(figures, run, ctx)
    if named:  # a run that finished but logged a failure class (CVS fails those too)
        return failed(NAME, f"the logs name failures: {'; '.join(named[:3])} (measured: "
                      f"{result.reason})"[:900], result.figures, result.details)
    return result


def evaluate(figures: dict[str, Any], run: MegatronRun, ctx: Context) -> CheckResult:
    problems = []
    if figures["exited_at_iteration"] != run.iterations:
        problems.append(f"no '[exiting program at iteration {run.iterations}]' line: Megatron "
                        "did not finish the iterations it was given (the ReFrame check's "
                        "sanity test fails the same way)")
    first, last = figures["loss_first"], figures["loss_last"]
    losses = figures.get("losses") or [v for v in (first, last) if v is not None]
    fell, fit = falls(losses)
    figures["loss_slope_per_step"] = round(fit, 6) if fit is not None else None
    if first is None or last is None:
        problems.append("Megatron printed no 'lm loss'")
    elif not fell:
        problems.append(f"lm loss did not fall ({first:.4f} -> {last:.4f}, least-squares "
                        f"slope {fit if fit is not None else float('nan'):+.4g} per "
                        "iteration)")
    tflops = figures["tflops_per_gpu"]
    if tflops is None:
        problems.append("Megatron printed no 'throughput per GPU (TFLOP/s/GPU)' (--log-throughput)")
    proxy = figures["workload"] == "proxy"
    shape = (f"{run.model.layers} blocks, seq {run.seq}, micro-batch {run.micro_batch}, "
             f"TP {run.tensor_parallel} x DP {run.data_parallel}, {run.precision}, recompute "
             f"{run.activation_checkpointing}, {run.transformer_impl} layers")
    head = f"PROXY ({shape})" if proxy else f"full model ({shape})"
    summary = (f"{head}: {tflops or 0:.1f} TFLOP/s/GPU (Megatron's), "
               f"{figures['tokens_per_s_per_gpu'] or 0:.0f} tokens/s/GPU, "
               f"{(figures['elapsed_s_per_iteration_median'] or 0) * 1e3:.0f} ms/iteration median "
               f"over {figures['iterations_timed']}, lm loss {first} -> {last}")
    peak = ctx.peak_tflops
    if peak and tflops and run.precision == "bf16":
        figures["peak_tflops"] = peak
        figures["mfu"] = round(tflops / peak, 4)
        summary += f", MFU {figures['mfu']:.1%}"
        if not proxy:
            low = below_minimum("MFU", figures["mfu"] * 100,
                                ctx.thresholds["train_min_mfu"] * 100, "%",
                                f"{tflops:.1f} of {peak:g} TFLOP/s per GPU")
            if low:
                problems.append(low)
    elif run.precision == "fp8":
        summary += " (fp8: not compared with bf16 figures or the bf16 peak)"
    return judge(NAME, problems, summary, figures)


def merge(results: list[CheckResult], ctx: Context) -> CheckResult:
    return merge_global(results, ctx.hosts)
