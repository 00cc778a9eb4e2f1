"""Runs the checks on every rank and reports from rank 0.

Every rank runs every check (SPMD, whatever started it: torchrun, srun, or this runner,
which starts one process per GPU, or two in CPU mode, when nothing else did). Rank 0
writes the report's facts before the ranks meet; the rendezvous is bounded by --timeout
and names the ranks that never came (rendezvous.py). After each check the ranks exchange
their results over a gloo group and rank 0 merges them, prints progress, rewrites the
JSON report after every check (atomically: a temporary file renamed over it, so a crash
or a job's time limit leaves the finished checks on disk, marked ``complete: false``), and
at the end prints the table (or, with --events, streams JSON lines for a host that
renders them). An exchange that times out ends the run with exit 2 and a report naming
the ranks that never reached it.
"""

from __future__ import annotations

import datetime as _dt
import gc
import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import CHECK_MODULES, CHECK_NAMES
from .across_ranks import summarize_ranks
from .doctor.before_checks import doctor_first, node_root
from .doctor.before_checks import stop as stop_doctor
from .fingerprint import fingerprint
from .gpu_data import (
    UsageError,
    device_peak,
    effective_thresholds,
    load_gpu_data,
    load_threshold_file,
    match_gpu,
)
from .image_manifest import load_manifest
from .job_rank import Launch, detect_launch, free_port, single_process
from .log_signatures import classify
from .options import check_consistency, manifest_path, parse, selected_checks
from .package_path import package_root
from .references import judge_against_references, load_references, relaxed_thresholds
from .rendezvous import RendezvousFailed, mark, meet, ranks_lost, whereabouts
from .result import CheckResult, failed, merge_ranks
from .run_facts import doctor_facts, run_facts, screen_facts
from .run_output import (
    SUITE_FAILED,
    Progress,
    destination,
    finish,
    hard_exit,
    own_destination,
    stopped,
    waiting_entry,
    write_partial,
)
from .run_report import exit_code, utc_now, verdict_line
from .screen.node_facts import node_facts
from .stragglers import CPU_MARGIN, GPU_MARGIN, judge_stragglers
from .telemetry import Sampler, open_reader
from .test_hooks import hang_for_test
from .vendor_figures import for_gpu as vendor_figures_for
from .vendor_figures import judge_vendor_figures

#: Checks that need more than one rank to mean anything (the runner then starts two
#: processes in CPU mode).
DISTRIBUTED_CHECKS = ("collectives", "groups", "repeated_init", "train")
SPAWNED_ENV = "IMAGEBUILD_VALIDATE_LAUNCHER"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["validate"]:  # the image's `imagebuild` shim passes its arguments on
        argv = argv[1:]
    options = parse(argv)  # argparse reports bad flags itself, exit code 2
    try:
        import torch  # noqa: F401  (the one third-party module the checks need)
    except ImportError as exc:
        print(f"error: {sys.executable} cannot import torch ({exc}); the checks run with the "
              "Python that has the image's torch", file=sys.stderr)
        return 2
    try:
        check_consistency(options)
        gpu_data = load_gpu_data(options.gpu_data)
        overrides = load_threshold_file(options.thresholds, gpu_data) if options.thresholds else {}
        if options.references:
            load_references(options.references)  # a bad file stops here, before any rank
        launch = detect_launch(os.environ)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Before any rank starts: a node that does not fit the image stops here, with the fix.
    doctor = doctor_first(options, os.environ, launch.local_rank if launch else 0)
    if doctor.stops:
        return stop_doctor(options, doctor, launch.local_rank if launch else 0,
                           launch.world_size if launch else 1)
    if launch is None:
        nproc = options.nproc or default_nproc(options)
        if nproc > 1:
            return spawn(argv, nproc)
        launch = single_process()
    return run_rank(options, launch, gpu_data, overrides, doctor)


def default_nproc(options: Any) -> int:
    import torch

    if not options.cpu and torch.cuda.is_available():
        return torch.cuda.device_count()
    wants_ranks = any(name in selected_checks(options) for name in DISTRIBUTED_CHECKS)
    return 2 if wants_ranks else 1


def spawn(argv: list[str], nproc: int, grace_s: float = 30.0) -> int:
    """Start ``nproc`` ranks of this runner on this host, like torchrun would, and wait.

    Rank 0 prints; the other ranks' stdout is dropped (their stderr stays visible). When
    a rank dies the others get ``grace_s`` to notice, then are terminated.
    """
    port = free_port()
    procs: list[subprocess.Popen] = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), **{SPAWNED_ENV: "spawn"})
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(package_root()), env.get("PYTHONPATH", "")) if p)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", __package__, *argv], env=env,
            stdout=None if rank == 0 else subprocess.DEVNULL))
    died_at: float | None = None
    try:
        while any(p.poll() is None for p in procs):
            if died_at is None and any(p.returncode not in (None, 0, 1) for p in procs):
                died_at = time.monotonic()
            if died_at is not None and time.monotonic() - died_at > grace_s:
                for p in procs:
                    if p.poll() is None:
                        p.terminate()
            time.sleep(0.1)
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            p.wait()
        raise
    codes = [p.returncode for p in procs]
    crashed = [(rank, code) for rank, code in enumerate(codes) if code not in (0, 1)]
    if crashed:
        print("error: rank(s) ended abnormally: "
              + ", ".join(f"rank {r} exit {c}" for r, c in crashed), file=sys.stderr)
        return 2
    return codes[0]


def _setup_nccl_log() -> tuple[str | None, Path]:
    """NCCL_DEBUG=INFO into a per-rank file the network check reads (RCCL honours the same
    variables). A user's own NCCL_DEBUG setting is left alone."""
    workdir = Path(tempfile.mkdtemp(prefix="imagebuild-validate-"))
    if "NCCL_DEBUG" not in os.environ:
        os.environ["NCCL_DEBUG"] = "INFO"
        os.environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET")
        os.environ["NCCL_DEBUG_FILE"] = str(workdir / "nccl.%h.%p.log")
        return os.environ["NCCL_DEBUG_FILE"], workdir
    if os.environ["NCCL_DEBUG"].upper() in ("INFO", "TRACE") and os.environ.get("NCCL_DEBUG_FILE"):
        return os.environ["NCCL_DEBUG_FILE"], workdir
    return None, workdir


def _local_context(options: Any, launch: Launch, gpu_data: dict[str, Any],
                   overrides: dict[str, Any]) -> Any:
    """What this rank knows alone, before it meets the others: its device, the GPU
    table's entry, peak and thresholds, the manifest."""
    import torch

    from .check_context import Context
    from .gpu import describe

    gpu = not options.cpu and torch.cuda.is_available()
    if gpu:
        index = launch.local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        device = torch.device("cuda", index)
        nccl_pattern, workdir = _setup_nccl_log()
    else:
        device = torch.device("cpu")
        nccl_pattern, workdir = None, Path(tempfile.mkdtemp(prefix="imagebuild-validate-"))
    ctx = Context(options=options, launch=launch, mode="gpu" if gpu else "cpu", device=device,
                  backend="nccl" if gpu else "gloo", gpu_data=gpu_data, workdir=workdir,
                  nccl_log_pattern=nccl_pattern)
    if gpu:
        ctx.gpu = describe(device.index)
        ctx.gpu_match = match_gpu(gpu_data, ctx.gpu.name, ctx.gpu.arch, ctx.gpu.memory_gib)
    if options.peak_tflops:
        ctx.peak_tflops, ctx.peak_source = float(options.peak_tflops), "--peak-tflops"
    elif ctx.gpu_match and ctx.gpu_match.model:
        peak = device_peak(ctx.gpu_match.model, ctx.gpu.multiprocessors if ctx.gpu else None)
        ctx.peak_tflops, ctx.partition = peak.tflops, peak.partition
        ctx.peak_source = (f"{ctx.gpu_model} in {gpu_data.get('_path')} (matched by "
                           f"{ctx.gpu_match.how}): {peak.source}")
    ctx.thresholds = effective_thresholds(gpu_data, ctx.gpu_model, overrides)
    ctx.manifest_path = manifest_path(options)
    ctx.manifest, ctx.manifest_problem = load_manifest(ctx.manifest_path)
    return ctx


def run_rank(options: Any, launch: Launch, gpu_data: dict[str, Any],
             overrides: dict[str, Any], doctor: Any = None) -> int:
    import torch
    import torch.distributed as dist

    started = utc_now()
    ctx = _local_context(options, launch, gpu_data, overrides)
    host = socket.gethostname()
    gpu = ctx.mode == "gpu"
    references = load_references(options.references) if options.references else None
    mine = references.for_gpu(ctx.gpu_model, cpu=not gpu) if references else {}
    rank_info = {"rank": ctx.rank, "host": host, "local_rank": launch.local_rank,
                 "device": str(ctx.device), "gpu_model": ctx.gpu_model,
                 **(ctx.gpu.to_dict() if ctx.gpu else {})}
    names = selected_checks(options)
    extra = {**doctor_facts(doctor), **screen_facts(os.environ), "node": node_facts(node_root())}
    path = destination(options, ctx.rank, host, started)
    master = f"{launch.master_addr}:{launch.master_port}"
    facts = run_facts(options, ctx, [rank_info], references, mine, extra)
    if path is not None:  # before any rendezvous: what rank 0 knows alone is on disk
        write_partial({**facts, "stage": "rendezvous"},
                      [waiting_entry(launch.world_size, master, options.timeout)], names,
                      started, options, path)
    waited = time.perf_counter()
    try:
        store = meet(launch, host, options.timeout)
    except RendezvousFailed as failure:
        print(f"error: rank {launch.rank}: rendezvous failed: {failure}", file=sys.stderr,
              flush=True)
        if launch.rank != 0 and not failure.joined.get(0):
            path = own_destination(options, launch.rank, host, started)
        if path is None:
            return SUITE_FAILED
        entry = failed("rendezvous", f"the ranks did not all meet: {failure}"[:600],
                       failure.to_figures()).with_duration(time.perf_counter() - waited)
        return stopped(facts, [], entry, names, started, options, path, "rendezvous")
    kwargs: dict[str, Any] = {"device_id": ctx.device} if gpu else {}  # eager NCCL init:
    timeout = _dt.timedelta(seconds=options.timeout)                  # its log names the net
    dist.init_process_group(ctx.backend, store=dist.PrefixStore("pg", store), rank=launch.rank,
                            world_size=launch.world_size, timeout=timeout, **kwargs)
    ctx.store = store
    ctx.control_group = (dist.new_group(backend="gloo", timeout=timeout)
                         if ctx.backend != "gloo" else None)
    ctx.hosts = ctx.all_gather_object(host)
    if not gpu:
        # Ranks sharing a host share its cores: oversubscribed threads would measure
        # contention, not the code.
        cores = len(os.sched_getaffinity(0))
        torch.set_num_threads(max(1, cores // ctx.local_world_size))
    ranks = ctx.all_gather_object(rank_info)
    if ctx.rank == 0:
        facts = run_facts(options, ctx, ranks, references, mine,
                          {**extra, "rendezvous": {"master": master,
                                                   "seconds": round((utc_now() - started)
                                                                    .total_seconds(), 2)}})
    code = _run_checks(ctx, names, ranks, facts, mine, references, started, path)
    # Drop what still holds the process groups (a train check's FSDP mesh, collectives'
    # work handles) while they are alive: left to interpreter exit, torch 2.13's gloo
    # teardown aborted ("terminate called without an active exception") in about one run
    # in four with collectives and train; none in 14 runs after this.
    dist.barrier()
    gc.collect()
    dist.destroy_process_group()
    gc.collect()
    return code


def _run_checks(ctx: Any, names: list[str], ranks: list[dict[str, Any]], facts: dict[str, Any],
                mine: dict[str, Any], references: Any, started: _dt.datetime,
                path: Path | None) -> int:
    import torch

    options = ctx.options
    gpu = ctx.mode == "gpu"
    margin = options.straggler_margin or (GPU_MARGIN if gpu else CPU_MARGIN)
    if gpu and ctx.gpu is not None:
        reader, telemetry_source = open_reader(ctx.gpu.vendor, ctx.gpu.index,
                                               ctx.gpu.pci_bus_id)
    else:
        reader, telemetry_source = None, "not available: CPU mode, no GPU to read"
    vendor = vendor_figures_for(ctx.gpu_data, ctx.gpu_model) if gpu else []
    progress = Progress(options.events, enabled=ctx.rank == 0)
    progress.emit("start", checks=names, world_size=ctx.world_size, mode=ctx.mode,
                  host=ctx.host)
    results: list[CheckResult] = []
    if ctx.rank == 0:
        facts["telemetry"] = telemetry_source
    for index, name in enumerate(names, start=1):
        progress.emit("check_started", name=name, index=index, total=len(names))
        module = importlib.import_module(f".checks.{CHECK_MODULES.get(name, name)}", __package__)
        sampler = Sampler(reader, telemetry_source).start() if reader else None
        begin = time.perf_counter()
        floors = ctx.thresholds
        # A figure the system's references cover is judged against them, not the floor.
        ctx.thresholds = relaxed_thresholds(name, floors, mine)
        mark(ctx.store, ctx.rank, f"in check {name}")
        try:
            hang_for_test(ctx.rank, name)
            result = module.run(ctx)
        except Exception as exc:  # noqa: BLE001 - a broken check is a failed result
            tail = traceback.format_exc().strip().splitlines()[-6:]
            first = str(exc).splitlines()[0] if str(exc) else ""
            signature = classify(f"{type(exc).__name__}: {first}")
            result = failed(name, f"error: {type(exc).__name__}: {first}"[:300],
                            {"log_signature": signature.name} if signature else {},
                            details=tail)
        result = result.with_duration(time.perf_counter() - begin)
        local_telemetry = sampler.stop() if sampler else None
        mark(ctx.store, ctx.rank, f"done with check {name}")
        try:
            gathered = [CheckResult.from_dict(d) for d in _gather_results(ctx, name, result)]
        except Exception as exc:
            if not ranks_lost(exc):
                raise
            ctx.thresholds = floors
            return _stalled(ctx, name, exc, facts, results, names[index - 1:], started, path)
        merge = getattr(module, "merge", None)
        merged = merge(gathered, ctx) if merge else merge_ranks(gathered, ctx.hosts)
        merged = summarize_ranks(merged)  # every rank judged, not rank 0's figures only
        ctx.thresholds = floors
        merged = judge_against_references(merged, mine, floors,
                                          references.system if references else None, gpu)
        merged = judge_vendor_figures(merged, vendor, ctx.nodes)
        merged = judge_stragglers(merged, ranks, margin)
        if gpu:  # beside the figure they explain: every rank's GPU during this check
            telemetry = ctx.all_gather_object(local_telemetry, tag=f"telemetry:{name}")
            merged = replace(merged, figures={**merged.figures, "telemetry": [
                {"rank": rank, **(t or {"source": telemetry_source})}
                for rank, t in enumerate(telemetry)]})
        results.append(merged)
        progress.emit("check_finished", result=merged.to_dict())
        if ctx.rank == 0 and path is not None and index < len(names):
            write_partial(facts, results, names[index:], started, options, path)
        del result, gathered
        gc.collect()  # the check's tensors (a whole model for train) go before the next
        if gpu:
            torch.cuda.empty_cache()

    code = exit_code(results, options.allow_cpu)
    if ctx.rank == 0:
        # After the checks: RCCL/NCCL, the plugins and the GEMM libraries are loaded by now.
        facts["fingerprint"] = fingerprint()
        code = finish(options, facts, results, started, path)
    return int(ctx.all_gather_object(code)[0])


def _stalled(ctx: Any, name: str, exc: Exception, facts: dict[str, Any],
             results: list[CheckResult], pending: list[str], started: _dt.datetime,
             path: Path | None) -> int:
    """A rank did not come to the exchange after ``name`` within --timeout: rank 0 names
    the ranks that are elsewhere (their last progress mark) and ends the run, exit 2."""
    print(f"error: rank {ctx.rank}: the ranks did not meet after check {name} within "
          f"{ctx.options.timeout} s: {str(exc).splitlines()[0][:200]}", file=sys.stderr)
    if ctx.rank != 0:
        hard_exit(SUITE_FAILED)
    where = whereabouts(ctx.store, ctx.world_size)
    behind = {r: w for r, w in where.items() if w != f"done with check {name}"}
    hosts = ctx.hosts
    named = "; ".join(f"rank {r} ({hosts[r] if r < len(hosts) else '?'}): "
                      f"{w or 'no progress recorded'}" for r, w in sorted(behind.items()))
    reason = (f"ranks did not meet after {name} within {ctx.options.timeout} s: "
              f"{named or 'every rank finished it (the exchange itself failed)'}")
    entry = failed(name, reason[:600], {"stalled_ranks": [
        {"rank": r, "host": hosts[r] if r < len(hosts) else None, "last_seen": w}
        for r, w in sorted(behind.items())], "timeout_s": ctx.options.timeout},
        details=[str(exc).splitlines()[0][:300]])
    stopped(facts, results, entry, pending[1:], started, ctx.options, path, "timeout")
    hard_exit(SUITE_FAILED)
    return SUITE_FAILED  # not reached


def _gather_results(ctx: Any, name: str, result: CheckResult) -> list[dict[str, Any]]:
    """Every rank's result of check ``name``. A rank that raised out of a check meets the
    others inside it: that exchange fails on both sides (different tags), the others'
    check fails with it, and the next exchange lines the ranks up again."""
    from .check_context import RanksOutOfStep

    tag = f"result:{name}"
    for _ in range(3):
        try:
            return ctx.all_gather_object(result.to_dict(), tag=tag)
        except RanksOutOfStep:
            continue
    raise RanksOutOfStep(f"ranks could not agree on the results of {name}")


__all__ = ["CHECK_NAMES", "main", "run_rank", "spawn", "verdict_line"]
