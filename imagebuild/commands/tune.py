"""``imagebuild tune {shapes,gemm,verify,te-file,edf,rccl}``: offline GEMM and RCCL tuning.

  shapes   the GEMM problems of a training step, in hipblaslt-bench terms, as a CSV:
           from a profiled step of the validation model here (--local), a profiler trace,
           a hipBLASLt LOG_MASK=32 log, a TunableOp untuned CSV, the model's dimensions
           (--model), or a command run under recording (-- CMD ...)
  gemm     tune those problems on this GPU (TunableOp and/or hipblaslt-bench) and write a
           tuning bundle: tuned files + tuning.json (recipe, library versions, GPU)
  verify   check a bundle matches here, and that GEMMs run without and with it show it
           in effect (per-problem TFLOP/s and speed-up; GPU-only)
  edf      an EDF beside a recipe's .sqsh that mounts a bundle and sets the variables
           that load it (<recipe>-tuning.toml); `imagebuild build --tuning` bakes it
           into a derived image instead (<recipe>-tuned.sqsh and .toml)
  rccl     collectives.csv from NCCL/RCCL debug logs; a tuner-plugin config from a sweep
  te-file  the file TransformerEngine loads (TE_HIPBLASLT_ALGO_LOAD) from a bundle's
           hipBLASLt results, recorded in the bundle so its EDF/image sets the variable

shapes, gemm and verify are the same code as the image's own `imagebuild tune ...` (its
shim), so they run in the image where the training runs.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from imagebuild.errors import TuneError
from imagebuild.inimage.tuning import command as tuning_command
from imagebuild.inimage.tuning import gemm_tuner, rccl_sweep
from imagebuild.recipe.site import default_site
from imagebuild.tune import te_layout
from imagebuild.tune.problem import host_errors


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune", help="offline GEMM and RCCL tuning (shapes, gemm, verify, te-file, edf, rccl)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="tune_command", metavar="STEP", required=True)

    shapes = sub.add_parser("shapes", help="list a training step's GEMM problems as a CSV")
    tuning_command.add_shapes_arguments(shapes)
    shapes.set_defaults(func=run_shapes)

    gemm = sub.add_parser("gemm", help="tune the problems on this GPU; write a bundle")
    gemm_tuner.add_gemm_arguments(gemm)  # the image's own flags: one definition
    gemm.set_defaults(func=run_gemm)

    rccl = sub.add_parser("rccl", help="collectives from NCCL/RCCL logs; tuner config")
    rccl.add_argument("logs", nargs="*", type=Path, help="NCCL_DEBUG=INFO logs")
    rccl.add_argument("--out", type=Path, default=Path("tuning/rccl"),
                      help="directory for the collectives CSV and the tuner config "
                           "(default tuning/rccl)")
    rccl.add_argument("--sweep-results", type=Path, default=None,
                      help="CSV collective,bytes,algorithm,protocol,busbw_gbs[,nNodes,nRanks,"
                           "channels] -> nccl_tuner.conf")
    rccl.add_argument("--records", type=Path, nargs="+", default=[], metavar="PATH",
                      help="the tuner plugin's own records (files, or directories of "
                           "tuner-<host>-<pid>.csv written with IMAGEBUILD_TUNER_RECORD=DIR): "
                           "the sizes RCCL asked the tuner about, no log needed")
    rccl.add_argument("--bundle", type=Path, default=None,
                      help="also put the tuner config into this tuning bundle (tuning.json "
                           "from `tune gemm`), so `validate --tuning`, `tune edf` and "
                           "`build --tuning` set NCCL_TUNER_CONFIG_FILE for the job")
    rccl.add_argument("--nranks", type=int, default=None,
                      help="communicator size for per-rank tuning lines (NCCL >= 2.23 "
                           "form) when the log has no COLL or communicator line to say it")
    rccl.add_argument("--sweep", action="store_true",
                      help="run the sweep here (GPU-only: rccl-tests per algorithm and "
                           "protocol over collectives.csv's sizes) into OUT/sweep.csv, then "
                           "the tuner config from it")
    rccl_sweep.add_rccl_sweep_arguments(rccl, with_out=False)
    rccl.set_defaults(func=run_rccl)

    verify = sub.add_parser("verify", help="does a bundle match here, and take effect?")
    tuning_command.add_verify_arguments(verify)
    verify.add_argument("--image-digest", default=os.environ.get("IMAGEBUILD_IMAGE_DIGEST"),
                        help="compare with this image digest instead of here")
    verify.add_argument("--hipblaslt-git-version", default=None,
                        help="compare with this hipBLASLt git revision")
    verify.add_argument("--gpu-arch", default=None, help="compare with this GPU architecture")
    verify.add_argument("--cu-count", type=int, default=None,
                        help="compare with this compute-unit count")
    verify.set_defaults(func=run_verify)

    te_file = sub.add_parser(
        "te-file", help="the file TransformerEngine loads (TE_HIPBLASLT_ALGO_LOAD), "
                        "from a bundle's hipBLASLt results")
    te_file.add_argument("bundle", type=Path, help="tuning bundle directory")
    te_file.add_argument("--dev-cap", type=int, default=None,
                         help="HIP device capability major*100+minor (default: from the "
                              "bundle's GPU architecture, gfx942 -> 904)")
    te_file.add_argument("--search-depth", type=int, default=None,
                         help="heuristic candidates TE searches for each tuned algorithm "
                              "(its aidx + 1; default 256)")
    te_file.add_argument("--manifest", type=Path, default=None,
                         help="the image manifest (/opt/imagebuild/manifest.json, the default "
                              "inside an image) whose TransformerEngine version picks the "
                              "file's layout (default: it, else the bundle's recipe)")
    te_file.add_argument("--te-version", default=None,
                         help="the TransformerEngine version that will read the file, instead "
                              "of the manifest's or the recipe's")
    te_file.add_argument("--te-layout", choices=te_layout.LAYOUTS, default=None,
                         help="the file's layout, whatever the version: 2025 has the fp8_scale "
                              "column (TE >= 2.4), 2024 has not (TE < 2.4)")
    te_file.set_defaults(func=run_te_file)

    edf = sub.add_parser("edf", help="an EDF beside the .sqsh that mounts a bundle")
    edf.add_argument("bundle", type=Path, help="tuning bundle directory")
    edf.add_argument("target", help="recipe name (its artifacts/<recipe>.sqsh) or a .sqsh")
    edf.add_argument("--site", default=default_site(),
                     help="site profile (default $IMAGEBUILD_SITE)")
    edf.add_argument("--output-dir", type=Path, default=None,
                     help="where the .sqsh is and the EDF goes (default: PROJECT/artifacts)")
    edf.add_argument("--mount-point", default=None,
                     help="where the bundle appears in the container (default "
                          "/opt/imagebuild/tuning)")
    edf.add_argument("--name", default=None,
                     help="EDF file stem (default <sqsh stem>-tuning)")
    edf.add_argument("--rocm-version", default=None,
                     help="ROCm version of a .sqsh target (picks the site's hooks; a "
                          "recipe's is known)")
    edf.set_defaults(func=run_edf)


def run_shapes(args: argparse.Namespace) -> int:
    return host_errors(tuning_command.run_shapes)(args)


def run_gemm(args: argparse.Namespace) -> int:
    return host_errors(gemm_tuner.run_gemm)(args)


def run_rccl(args: argparse.Namespace) -> int:
    from imagebuild.tune import rccl

    if args.bundle is not None and not (args.sweep_results or args.sweep):
        raise TuneError("tune rccl --bundle: no tuner config to add",
                        hint="with --sweep-results CSV or --sweep")
    if args.logs or args.records:
        from imagebuild.tune.tuner_record import parse_records

        records = rccl.parse_logs(args.logs, nranks=args.nranks) if args.logs else []
        recorded = parse_records(args.records) if args.records else []
        rccl.write_collectives_csv(records + recorded, args.out / "collectives.csv")
        for r in records:
            print(f"{r.collective or '?':14} {r.bytes:>12} B  x{r.calls:<5} "
                  f"{r.algorithm or '?'}/{r.protocol or '?'}"
                  + (f"  nranks {r.nranks}" if r.nranks else ""))
        for r in recorded:
            print(f"{r.collective:14} {r.bytes:>12} B  nranks {r.nranks}, asked by "
                  f"{r.calls} process(es) on {r.hosts} host(s)  (tuner record)")
        print(f"{len(records) + len(recorded)} collectives (whole-buffer bytes) -> "
              f"{args.out / 'collectives.csv'}")
        if unnamed := sum(1 for r in records if not r.collective):
            print(f"note: {unnamed} without a collective name (the name-less tuning lines of "
                  "NCCL <= 2.21 / RCCL 2.21); log with NCCL_DEBUG_SUBSYS=COLL,TUNING to "
                  "name them")
    if args.sweep:
        swept = host_errors(rccl_sweep.run_rccl_sweep)(args)
        if swept is not None and args.sweep_results is None:
            args.sweep_results = swept
    if args.sweep_results:
        points = host_errors(rccl_sweep.read_sweep_csv)(args.sweep_results)
        args.out.mkdir(parents=True, exist_ok=True)
        config = rccl.tuner_config(points)
        (args.out / "nccl_tuner.conf").write_text(config)
        print(f"tuner config -> {args.out / 'nccl_tuner.conf'} (NCCL_TUNER_CONFIG_FILE)")
        if args.bundle is not None:
            path = rccl.add_to_bundle(args.bundle, config)
            print(f"tuner config -> {path} (the bundle sets NCCL_TUNER_CONFIG_FILE; the "
                  "image's tuner plugin, recipe rccl_tuner, reads it)")

    if not (args.logs or args.records or args.sweep_results or args.sweep):
        raise TuneError("tune rccl: nothing to do",
                        hint="pass NCCL_DEBUG=INFO log files, --records DIR and/or "
                             "--sweep-results CSV")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """Match against the flags' target (or here), then compare GEMMs without and with the
    bundle on this GPU."""
    from imagebuild.inimage.tuning.bundle_format import Target
    from imagebuild.tune.bundle import check_match, read_bundle

    bundle = read_bundle(args.bundle)
    given = Target(args.image_digest or None, args.hipblaslt_git_version, None,
                   args.gpu_arch, args.cu_count)
    if any(vars(given).values()):
        check_match(bundle, given, args.bundle)
    try:
        import torch

        check_match(bundle, Target(torch_version=torch.__version__), args.bundle)
    except ImportError:
        pass
    return host_errors(tuning_command.run_verify)(args)


def run_te_file(args: argparse.Namespace) -> int:
    from imagebuild.inimage.tuning.bundle_format import tuning_env
    from imagebuild.tune import te_algo
    from imagebuild.tune.bundle import read_bundle

    bundle = read_bundle(args.bundle)
    choice = te_layout.choose_layout(args.te_layout, args.te_version, args.manifest,
                                     bundle.recipe)
    entries = te_algo.te_entries(args.bundle, bundle, args.dev_cap,
                                 args.search_depth or te_algo.DEFAULT_SEARCH_DEPTH)
    path = te_algo.write_te_file(args.bundle, bundle, entries, choice.layout)
    for e in entries:
        k = e.key
        print(f"dev_cap {k.dev_cap}  m={k.m} n={k.n} k={k.k} {k.trans_a}{k.trans_b} "
              f"{k.type_a}  lda={k.lda} ldb={k.ldb} ldd={k.ldd}  algo_id {e.algo_id}")
    skipped = len(bundle.problems) - len(entries)
    print(f"{len(entries)} algorithms -> {path} (TE layout {choice.layout}: {choice.why}"
          + (f"; {skipped} problems without a hipBLASLt solution or batched" if skipped
             else "") + ")")
    env = tuning_env(read_bundle(args.bundle))
    print(f"loads with TE_HIPBLASLT_ALGO_LOAD={env['TE_HIPBLASLT_ALGO_LOAD']} "
          "(tune edf, build --tuning and validate --tuning set it)")
    return 0


def run_edf(args: argparse.Namespace) -> int:
    from imagebuild.tune.tuned_edf import write_tuned_edf

    if not args.site:
        raise TuneError("tune edf: no site profile",
                        hint="--site NAME (e.g. cscs-beverin) or $IMAGEBUILD_SITE")
    artifact, bundle = write_tuned_edf(args.bundle, args.target, args.site,
                                       output_dir=args.output_dir,
                                       mount_point=args.mount_point,
                                       rocm_version=args.rocm_version, name=args.name)
    print(f"edf   {artifact.path}  sha256:{artifact.sha256}  (site {args.site}; bundle "
          f"{args.bundle}: {', '.join(bundle.files)})")
    print(f"use:  srun --environment={artifact.path} ...")
    return 0
