"""What the report says about the run besides the checks: hosts, ranks, versions, GPU,
peak, thresholds, references, the node, the doctor's findings and the options. Rank 0
gathers them twice: before the rendezvous from what it knows alone (its own rank, its
node), and after it from every rank."""

from __future__ import annotations

import os
from typing import Any


def run_facts(options: Any, ctx: Any, ranks: list[dict[str, Any]], references: Any,
              mine: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``extra``: the node, the doctor, the rendezvous (what the runner learnt itself)."""
    from .checks.environment import installed_versions

    manifest = ctx.manifest or {}
    hosts = ctx.hosts or [ctx.host]
    return {
        "host": ctx.host,
        "hosts": sorted(set(hosts)),
        "nodes": len(set(hosts)),
        "world_size": ctx.world_size,
        "launcher": ctx.launch.launcher,
        "mode": ctx.mode,
        "backend": ctx.backend,
        "image": options.image or os.environ.get("IMAGEBUILD_IMAGE") or manifest.get("image"),
        "recipe": options.recipe or manifest.get("recipe"),
        "input_hash": manifest.get("input_hash"),
        "manifest_path": ctx.manifest_path,
        "manifest_found": ctx.manifest is not None,
        "versions": installed_versions(),
        "gpu_model": ctx.gpu_model,
        "peak_bf16_tflops": ctx.peak_tflops,
        "peak_source": ctx.peak_source or None,
        "partition": ctx.partition,
        "gpus": [r for r in ranks if r.get("name")],
        "ranks": ranks,
        "thresholds": ctx.thresholds,
        "system": (options.system or (references.system if references else None)
                   or ctx.host),
        "references": ({"system": references.system, "source": references.provenance(),
                        "described_as": references.source,
                        "figures": {k: r.to_list() for k, r in sorted(mine.items())}}
                       if references else None),
        **extra,
        "options": {key: value for key, value in sorted(vars(options).items())
                    if key not in ("events",)},
    }


def doctor_facts(doctor: Any) -> dict[str, Any]:
    """The doctor's part of the report: its findings where it ran, else why it did not."""
    from .doctor.finding import report

    if doctor is None:
        return {"doctor": {"ran": False, "why": "not run by this process"}}
    if doctor.skipped:
        return {"doctor": {"ran": False, "why": doctor.skipped}}
    needs = doctor.needs
    return {"doctor": {"ran": True, **report(list(doctor.findings),
                                             {"image": needs.name if needs else None,
                                              "rocm": needs.rocm if needs else None,
                                              "part": "image"})}}


def screen_facts(environ: Any) -> dict[str, Any]:
    """Where the batch job screened its nodes first (IMAGEBUILD_SCREEN_DIR, set by the
    script of ``validate --launcher sbatch --screen``): the nodes it kept and those it
    excluded, with their reasons."""
    import json
    from pathlib import Path

    directory = environ.get("IMAGEBUILD_SCREEN_DIR")
    if not directory:
        return {}
    reports = {}
    for path in sorted(Path(directory).glob("*.json")):
        try:
            report = json.loads(path.read_text())
            reports[report["node"]] = report
        except (OSError, ValueError, KeyError):
            continue
    try:
        listed = (Path(directory) / "exclude").read_text().strip()
    except OSError:
        listed = ""
    excluded = [n for n in listed.split(",") if n]
    return {"screen": {
        "dir": directory,
        "passed": sorted(n for n, r in reports.items() if r.get("verdict") == "PASS"),
        "excluded": [{"node": n, "reasons": (reports[n]["reasons"] if n in reports
                                             else ["no report: its screen did not finish"])}
                     for n in excluded]}}
