#!/usr/bin/env bash
# The GPU paths of the in-image checks and of offline GEMM tuning, run from a checkout on a
# host with one GPU and a Python that has torch (no image, no host package): the users'
# Megatron-LM run, the validation checks (GEMM, attention, collectives, the Llama-3.1-8B
# train step) and TunableOp's shapes -> gemm -> verify loop. Each step runs under its own
# time limit, so one that fails or hangs leaves the others their time; every step's output,
# its exit code and its wall time land in OUT_DIR, reports as JSON.
#
# Usage: MEGATRON_DIR=/path/to/Megatron-LM OUT_DIR=/tmp/gpu-checks bash benchmarks/gpu_checks.sh
#   PYTHON          interpreter with torch (default python3)
#   MEGATRON_DIR    a Megatron-LM checkout (pretrain_gpt.py); unset skips the Megatron step
#   MEGATRON_LAYERS blocks of the Megatron proxy (default 4: Megatron's local, unfused
#                   attention holds seq^2 scores per block, so 8192 tokens x 32 blocks do
#                   not fit one GPU; the report says "PROXY" with the shape)
#   TUNE_TOP        GEMM problems to tune, most time first (default 4)
#   STEPS           which of megatron, validate, tune to run (default all three)
#
# Figures are for the configuration each report prints; a reduced run says it is a proxy.
#
# Re-run 2026-11-26 at 0a204a5 on the same card, torch and Megatron commit (STEPS one at a
# time): validate passed in 49 s: gemm 713.3 TFLOP/s (72% of 989; worst [128256, 4096, 8192]
# 589.5), attention fwd 572.5 / bwd 475.9 / fwd+bwd 500.0 TFLOP/s, train 25 of 32 blocks
# (AC full, seq 8192) 8,507 tokens/s, 391 TFLOP/s, MFU 39.5 %, HFU 51.8 % (proxy);
# megatron 4 blocks 21,866 tokens/s, 218.5 TFLOP/s (Megatron's), 375 ms/iteration, lm loss
# 12.60 -> 3.45 (proxy); tune: TunableOp again kept "Default" for the top 4 problems and
# verify failed it as not in effect (701.8/714.8/686.1/689.2 -> 701.7/718.2/688.2/701.3).
#
# Measured 2026-11-26 on one NVIDIA H200 (141 GB, driver 580.159.04), torch 2.11.0+cu130,
# Python 3.12.3, Megatron-LM swiss-ai/main 81d44dbe (the users' fork) with its local (torch)
# layers, as no TransformerEngine or Apex was installed there; an NVIDIA card, not an AMD
# one, so these prove the GPU code paths, not an image's ROCm figures:
#   gemm       698.0 TFLOP/s bf16 mean over the 15 Llama-3.1-8B training GEMMs at seq 8192
#              (71% of the 989 TFLOP/s datasheet peak); worst [128256, 4096, 8192] 562.6
#   attention  cudnn SDPA at seq 8192: fwd 595.6, bwd 466.1, fwd+bwd 496.9 TFLOP/s
#   train      FSDP2 step, 26 of 32 blocks (the planner's largest fit: 32 need 143.7 GiB),
#              AC full, seq 8192: 8,112 tokens/s, 387 TFLOP/s, MFU 39.1% (proxy), 1.01 s/step
#   megatron   4 blocks, seq 8192, no recompute: 22,057 tokens/s, 220.4 TFLOP/s (Megatron's
#              count), 371 ms/iteration, lm loss 12.60 -> 3.45 over 8 iterations (proxy)
#   like for like, 16 blocks, seq 8192, micro-batch 1, AC/recompute full (run as
#   `--checks train,megatron --train-layers 16 --activation-checkpointing full`):
#              FSDP2 step 12,735 tokens/s (389 TFLOP/s) vs Megatron's local layers 5,167
#              tokens/s (157.7 TFLOP/s, 1,585 ms/iteration): Megatron's local attention
#              materializes the seq x seq scores where the step's SDPA is fused
#   with references, history and telemetry (`--checks devices,gemm,attention,train
#   --train-layers 8 --references R --history H`, run twice): gemm 705.9 / 705.6 TFLOP/s
#   (operands now rotate through twice the H200's 50 MB L2, gpus.json llc_mib; the full
#   GH100 die has 60 MB), attention 498.2 / 499.5, train 8 blocks 27,372 / 27,500
#   tokens/s (MFU = HFU 46.6 / 46.8 %, no recompute); NVML telemetry:
#   SM clock 1515-1980 MHz, up to 701 W, 62 C, "sw_power_cap" throttling in gemm, attention
#   and train; the history flagged nothing (within +-5 %); 19 libraries fingerprinted
#   three tracked runs again after every rank's figures were judged and the band became the
#   earlier runs' median +- max(3 MAD, 5 %) (same command, 2026-11-26, same card): gemm
#   696.8 / 689.4 / 693.9 TFLOP/s (worst shape 597.9 / 590.5 / 568.5, a different shape in
#   run 3), attention fwd+bwd 491.2 / 490.5 / 490.3, train 8 blocks 26,785 / 26,814 / 26,793
#   tokens/s (MFU = HFU 45.6 %); all within the references (.dev/h200-refs.json, -10 %); the
#   history flagged no run; NVML: SM clock down to 1230-1470 MHz under load, up to 699 W,
#   61 C, sw_power_cap in gemm, attention and train
#   tune       shapes --local 11 s; TunableOp kept cuBLAS's "Default" for all 4 top problems
#              (688.0/688.5/702.3/623.5 TFLOP/s before, 684.9/688.2/702.9/603.9 after:
#              same kernels, so run-to-run noise is up to 3%); verify reports it not in
#              effect, as nothing changed
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-/tmp/gpu-checks}
MEGATRON_LAYERS=${MEGATRON_LAYERS:-4}
TUNE_TOP=${TUNE_TOP:-4}
STEPS=" ${STEPS:-megatron validate tune} "
mkdir -p "$OUT_DIR"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

step() {  # step NAME LIMIT_S CMD...: run CMD under a time limit, log to OUT_DIR/NAME.log
    local name=$1 limit=$2 start rc
    shift 2
    echo "== $name (limit ${limit} s): $*"
    start=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1
    rc=$?
    echo "== $name: exit $rc after $(($(date +%s) - start)) s"
    tail -n 30 "$OUT_DIR/$name.log"
    echo
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null \
        || rocm-smi --showproductname 2>/dev/null
    "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "hip", torch.version.hip, "device", torch.cuda.get_device_name(0))'
} 2>&1 | tee "$OUT_DIR/host.txt"

if [[ $STEPS == *" megatron "* && -n ${MEGATRON_DIR:-} ]]; then
    # Megatron's rank 0 runs `make -C megatron/core/datasets` at start and exits when it
    # fails; its Makefile asks python3-config for the extension suffix, which a venv may
    # lack: answer from the interpreter's own sysconfig then.
    if ! command -v python3-config >/dev/null; then
        shim=$(mktemp -d)
        printf '#!/bin/sh\nexec %s -c "import sysconfig; print(sysconfig.get_config_var(\\"EXT_SUFFIX\\"))"\n' \
            "$PYTHON" >"$shim/python3-config"
        chmod +x "$shim/python3-config"
        export PATH="$shim:$PATH"
    fi
    step megatron-helpers 90 make -C "$MEGATRON_DIR/megatron/core/datasets"
    step megatron 180 "$PYTHON" -m imagebuild.inimage --checks megatron \
        --megatron-dir "$MEGATRON_DIR" --megatron-transformer-impl local \
        --train-layers "$MEGATRON_LAYERS" --megatron-iterations 6 --megatron-warmup 2 \
        --megatron-timeout 160 --report "$OUT_DIR/megatron.json"
fi

[[ $STEPS == *" validate "* ]] && step validate 200 "$PYTHON" -m imagebuild.inimage --checks devices,gemm,attention,collectives,train \
    --report "$OUT_DIR/validate.json"

[[ $STEPS == *" tune "* ]] || exit 0
step tune-shapes 60 "$PYTHON" -m imagebuild.inimage tune shapes --local \
    --out "$OUT_DIR/problems.csv"
step tune-gemm 100 "$PYTHON" -m imagebuild.inimage tune gemm "$OUT_DIR/problems.csv" \
    --method tunableop --top "$TUNE_TOP" --budget-s 60 --out "$OUT_DIR/bundle"
step tune-verify 70 "$PYTHON" -m imagebuild.inimage tune verify "$OUT_DIR/bundle" \
    --json "$OUT_DIR/verify.json"
