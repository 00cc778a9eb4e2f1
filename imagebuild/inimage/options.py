"""Flags of the in-image runner; ``imagebuild validate`` forwards the same ones."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from . import CHECK_NAMES
from .gpu_data import UsageError

DEFAULT_MANIFEST = "/opt/imagebuild/manifest.json"
MANIFEST_ENV = "IMAGEBUILD_MANIFEST"
#: Checks left out unless --checks names them (tuning also runs with --tuning).
OPTIONAL_CHECKS = ("tuning", "rccl_tests")


def _size(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30}
    text = text.strip().lower().removesuffix("ib").removesuffix("b")
    factor = units.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in units else text
    try:
        value = int(digits) * factor
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected bytes like 151003136 or 64M") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive size")
    return value


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in CHECK_NAMES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown check {', '.join(unknown)}; choose from {', '.join(CHECK_NAMES)}")
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= 1")
    return value


def add_arguments(parser: argparse.ArgumentParser, output: bool = True) -> None:
    """The runner's flags; the host CLI adds these (output=False: it owns --report and has
    no --events) to its own parser and forwards them."""
    g = parser.add_argument_group("checks")
    g.add_argument("--checks", type=_names, default=None, metavar="LIST",
                   help=f"comma-separated checks to run, of {','.join(CHECK_NAMES)} "
                        f"(default: all but {','.join(OPTIONAL_CHECKS)}, which run when named "
                        "here; tuning also with --tuning)")
    g.add_argument("--skip", type=_names, default=[], metavar="LIST",
                   help="comma-separated checks not to run")
    g.add_argument("--allow-cpu", action="store_true",
                   help="exit 0 when GPU checks were skipped because no GPU is visible")
    g.add_argument("--cpu", action="store_true",
                   help="run in CPU mode even when a GPU is visible")
    g.add_argument("--doctor", action=argparse.BooleanOptionalAction, default=True,
                   help="run `imagebuild doctor` first and stop before the checks when the "
                        "node does not fit the image (default yes; only where the checks "
                        "meet this node's AMD GPUs)")
    g.add_argument("--manifest", default=None, metavar="PATH",
                   help=f"image manifest to compare against (default: ${MANIFEST_ENV} "
                        f"or {DEFAULT_MANIFEST})")
    g.add_argument("--thresholds", default=None, metavar="FILE",
                   help="threshold overrides (JSON; the host CLI also reads YAML)")
    g.add_argument("--references", default=None, metavar="FILE",
                   help="this system's expected figures with tolerances (JSON: system, gpus: "
                        "{model: {check.figure: [value, lower, upper, unit]}}); a figure "
                        "with a reference is judged against it instead of the generic floor")
    g.add_argument("--history", default=None, metavar="FILE",
                   help="append this run's key figures, image identity and configuration to "
                        "FILE (JSON lines, one file per system); imagebuild report --history "
                        "FILE shows them over time")
    g.add_argument("--system", default=None, metavar="NAME",
                   help="the system's name in the report and history (default: the "
                        "references' system, else the host)")
    g.add_argument("--straggler-margin", type=float, default=None, metavar="FRACTION",
                   help="a rank whose per-rank figure (GEMM, attention, hipBLASLt TFLOP/s) is "
                        "more than FRACTION below the median of its peers is named and fails "
                        "the check (default 0.10 on GPUs, 0.5 in CPU mode, whose ranks share "
                        "cores with the rest of the host)")
    g.add_argument("--cpu-gemm", action="store_true",
                   help="in CPU mode, run the gemm check on the CPU proxy model's GEMMs in "
                        "float32 (per rank, no threshold) instead of skipping it")
    g.add_argument("--peak-tflops", type=float, default=None, metavar="X",
                   help="bf16 dense peak TFLOP/s per device, instead of the GPU table")
    g.add_argument("--gpu-data", default=None, metavar="PATH",
                   help="GPU peak/threshold table (default: gpus.json shipped with the checks)")
    g.add_argument("--nproc", type=_positive, default=None, metavar="N",
                   help="processes to start when no launcher (torchrun, srun) started this "
                        "one (default: one per visible GPU; 2 in CPU mode)")
    g.add_argument("--timeout", type=_positive, default=900, metavar="S",
                   help="seconds a rank waits for the others before giving up (default 900)")
    g.add_argument("--hipblaslt-bench", default=None, metavar="PATH",
                   help="hipblaslt-bench to run (default: the manifest's, then PATH)")
    g.add_argument("--rccl-tests-dir", default=None, metavar="DIR",
                   help="the rccl-tests binaries of the rccl_tests check (default: "
                        "$IMAGEBUILD_RCCL_TESTS_DIR, else /opt/rccl-tests/bin)")
    g.add_argument("--attention-seq", type=_positive, default=8192, metavar="N",
                   help="sequence length of the attention check (default 8192)")
    g.add_argument("--collective-sizes", type=lambda s: [_size(x) for x in s.split(",") if x],
                   default=None, metavar="LIST",
                   help="sweep sizes in bytes (default: 1M..1G including 151003136 and "
                        "302006272 on GPU; 64K,1M,4M on CPU); the train step's own FSDP2 "
                        "sizes (per block and the root group's, for this many ranks) and, on "
                        "GPU, Megatron's bucket sizes are always added")
    t = parser.add_argument_group("train step")
    t.add_argument("--train-layers", type=_positive, default=None, metavar="N",
                   help="transformer blocks; fewer than the model's 32 make a declared proxy "
                        "(default: all 32 when the ranks can hold them, else a proxy)")
    t.add_argument("--train-seq", type=_positive, default=None, metavar="N",
                   help="sequence length (default 8192; 256 in CPU mode)")
    t.add_argument("--train-batch", type=_positive, default=1, metavar="N",
                   help="sequences per rank and step (default 1)")
    t.add_argument("--train-steps", type=_positive, default=None, metavar="N",
                   help="timed steps (default 20; 4 in CPU mode)")
    t.add_argument("--train-warmup", type=_positive, default=None, metavar="N",
                   help="untimed warm-up steps (default 5; 1 in CPU mode)")
    t.add_argument("--compile", action="store_true",
                   help="torch.compile each transformer block (slower start, faster steps)")
    t.add_argument("--activation-checkpointing", choices=("auto", "none", "selective", "full"),
                   default="auto",
                   help="recompute blocks in backward: none, selective (every other block) or "
                        "full (default auto: the cheapest that fits all 32 blocks)")
    t.add_argument("--gemm-problems", default=None, metavar="CSV",
                   help="GEMM problems for the gemm check instead of those of the train step "
                        "(CSV columns m,n,k,transA,transB[,count] in hipBLASLt column-major "
                        "terms)")
    t.add_argument("--tuning", default=None, metavar="DIR",
                   help="a tuning bundle (imagebuild tune gemm): run the tuning check, GEMMs "
                        "of its problems without and with it (host: mounted into the image "
                        "and loaded for every check)")
    m = parser.add_argument_group(
        "megatron (the image's Megatron-LM pretrain_gpt.py on the train step's model, blocks, "
        "sequence and micro-batch)")
    m.add_argument("--megatron-dir", default=None, metavar="DIR",
                   help="the Megatron-LM checkout to run (default: $MEGATRON_LM_DIR, which "
                        "images with Megatron set)")
    m.add_argument("--megatron-fp8", action="store_true",
                   help="the FP8 variant (TransformerEngine --fp8-format hybrid), reported as "
                        "fp8 and never judged against bf16 figures")
    m.add_argument("--megatron-transformer-impl", choices=("transformer_engine", "local"),
                   default="transformer_engine",
                   help="Megatron's layers: TransformerEngine (the ReFrame check's, default) or "
                        "local torch layers for an image without TransformerEngine (reported "
                        "as such)")
    m.add_argument("--megatron-tp", type=_positive, default=1, metavar="N",
                   help="tensor-parallel size (sequence parallelism is on when > 1)")
    m.add_argument("--megatron-iterations", type=_positive, default=10, metavar="N",
                   help="timed iterations after the warm-up (default 10)")
    m.add_argument("--megatron-warmup", type=_positive, default=3, metavar="N",
                   help="warm-up iterations left out of the figures (default 3)")
    m.add_argument("--megatron-tokenizer-model", default=None, metavar="PATH",
                   help="a mounted SentencePiece tokenizer.model (Llama2Tokenizer, as the "
                        "ReFrame check); default Megatron's NullTokenizer with the Llama-3 "
                        "vocabulary size")
    m.add_argument("--megatron-timeout", type=_positive, default=1800, metavar="S",
                   help="seconds each Megatron rank may run (default 1800)")
    n = parser.add_argument_group("network and placement")
    n.add_argument("--expect-net-provider", default=None, metavar="NAME",
                   help="libfabric provider RCCL/NCCL must select, e.g. cxi on HPE Slingshot "
                        "(default: $FI_PROVIDER when set)")
    n.add_argument("--expect-binding", action="store_true",
                   help="the launcher binds each rank to cores near its GPU: a rank on every "
                        "core of the node fails (also implied by SLURM_CPU_BIND_TYPE)")
    if not output:
        return
    o = parser.add_argument_group("output")
    o.add_argument("--report", default=None, metavar="PATH",
                   help="JSON report path ('-' for none; default "
                        "./reports/validate-<host>-<time>.json)")
    o.add_argument("--events", action="store_true",
                   help="print progress and the report as JSON lines on stdout (for a host)")
    o.add_argument("--image", default=None, help="image reference to record in the report")
    o.add_argument("--recipe", default=None, help="recipe name to record in the report")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="imagebuild validate",
        description="Validate this environment: versions, GPUs, GEMM, attention, collectives "
                    "and a Llama-3.1-8B training step.")
    add_arguments(parser)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def selected_checks(options: argparse.Namespace) -> list[str]:
    # The tuning check runs by default only when there is a bundle to check; rccl_tests only
    # when asked for (minutes of GPU time measuring what collectives measures, with RCCL's
    # own benchmarks).
    chosen = options.checks or [
        name for name in CHECK_NAMES
        if name not in OPTIONAL_CHECKS or (name == "tuning" and getattr(options, "tuning", None))]
    return [name for name in CHECK_NAMES if name in chosen and name not in options.skip]


def manifest_path(options: argparse.Namespace) -> str:
    return options.manifest or os.environ.get(MANIFEST_ENV) or DEFAULT_MANIFEST


def check_consistency(options: argparse.Namespace) -> None:
    if not selected_checks(options):
        raise UsageError("--checks/--skip leave no check to run")
    if options.gemm_problems:
        from .model.workload import read_gemm_problems

        try:
            read_gemm_problems(options.gemm_problems)
        except ValueError as exc:
            raise UsageError(f"--gemm-problems: {exc}") from None
    margin = getattr(options, "straggler_margin", None)
    if margin is not None and not 0 < margin < 1:
        raise UsageError(f"--straggler-margin {margin}: expected a fraction between 0 and 1, "
                         "like 0.1 for 10 %")
    if options.peak_tflops is not None and options.peak_tflops <= 0:
        raise UsageError(f"--peak-tflops {options.peak_tflops}: expected a positive number")
