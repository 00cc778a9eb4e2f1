#!/usr/bin/env bash
# The GPU paths of the in-image checks and of offline GEMM tuning, run from a checkout on a
# host with one GPU and a Python that has torch (no image, no host package): the users'
# Megatron-LM run, the validation checks (GEMM, attention, collectives, the Llama-3.1-8B
# train step) and TunableOp's shapes -> gemm -> verify loop. Each step runs under its own
# time limit, so one that fails or hangs leaves the others their time.
#
# Everything a run produces is its evidence, written under benchmarks/results/<device>/
# (OUT_DIR), to be committed with the run: command.txt (each step's exact command, the
# checkout's commit, the variables below), host.txt (GPU, driver, Python, torch), every
# step's log, exit code and wall time (steps.tsv), the reports as JSON (megatron.json,
# validate.json, verify.json), the tuning problems and bundle, the references the checks
# were judged against (REFERENCES, copied in as references.json) and history.jsonl, to which every validate run
# on that device appends (imagebuild report --history benchmarks/results/<device>/
# history.jsonl shows the figures over time). The docs quote GPU figures only from these
# files: a figure with no committed file behind it is not quoted anywhere.
#
# Usage: MEGATRON_DIR=/path/to/Megatron-LM bash benchmarks/gpu_checks.sh
#   PYTHON          interpreter with torch (default python3)
#   OUT_DIR         where the evidence goes (default benchmarks/results/<device>, the device
#                   named from torch's device name: "NVIDIA H200" -> nvidia-h200)
#   MEGATRON_DIR    a Megatron-LM checkout (pretrain_gpt.py); unset skips the Megatron step
#   MEGATRON_LAYERS blocks of the Megatron proxy (default 4: Megatron's local, unfused
#                   attention holds seq^2 scores per block, so 8192 tokens x 32 blocks do
#                   not fit one GPU; the report says "PROXY" with the shape)
#   TUNE_TOP        GEMM problems to tune, most time first (default 4)
#   STEPS           which of megatron, validate, tune to run (default all three)
#   REFERENCES      a references file in JSON (docs/validate.md; the in-image runner reads
#                   JSON) to judge the figures by
#
# Figures are for the configuration each report prints; a reduced run says it is a proxy.
# No report of a run is committed yet: the next GPU run writes the first.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
MEGATRON_LAYERS=${MEGATRON_LAYERS:-4}
TUNE_TOP=${TUNE_TOP:-4}
STEPS=" ${STEPS:-megatron validate tune} "
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

# The device's name as torch reports it, made a folder name ("NVIDIA H200" -> nvidia-h200,
# "AMD Instinct MI300A" -> amd-instinct-mi300a); "cpu" without a GPU.
device=$("$PYTHON" -c 'import re, torch
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
print(re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-"))' 2>/dev/null) || device=unknown
OUT_DIR=${OUT_DIR:-$REPO/benchmarks/results/$device}
mkdir -p "$OUT_DIR"
HISTORY="$OUT_DIR/history.jsonl"

{
    echo "# benchmarks/gpu_checks.sh run of $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit $(git -C "$REPO" rev-parse HEAD 2>/dev/null)$(git -C "$REPO" status --porcelain \
        --untracked-files=no 2>/dev/null | grep -q . && echo ' (with uncommitted changes)')"
    echo "PYTHON=$PYTHON STEPS='${STEPS# }' MEGATRON_LAYERS=$MEGATRON_LAYERS TUNE_TOP=$TUNE_TOP"
    echo "MEGATRON_DIR=${MEGATRON_DIR:-} $( [[ -n ${MEGATRON_DIR:-} ]] && \
        git -C "$MEGATRON_DIR" rev-parse HEAD 2>/dev/null)"
    echo "REFERENCES=${REFERENCES:-}"
} >"$OUT_DIR/command.txt"
printf 'step\texit\twall_s\n' >"$OUT_DIR/steps.tsv"

step() {  # step NAME LIMIT_S CMD...: run CMD under a time limit, log to OUT_DIR/NAME.log
    local name=$1 limit=$2 start rc
    shift 2
    printf '%s (limit %s s): %s\n' "$name" "$limit" "$*" >>"$OUT_DIR/command.txt"
    echo "== $name (limit ${limit} s): $*"
    start=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$OUT_DIR/$name.log" 2>&1
    rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - start))" >>"$OUT_DIR/steps.tsv"
    echo "== $name: exit $rc after $(($(date +%s) - start)) s"
    tail -n 30 "$OUT_DIR/$name.log"
    echo
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>/dev/null \
        || rocm-smi --showproductname 2>/dev/null
    "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "hip", torch.version.hip, "device",
torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)'
} 2>&1 | tee "$OUT_DIR/host.txt"

judged=()
if [[ -n ${REFERENCES:-} ]]; then
    cp "$REFERENCES" "$OUT_DIR/references.json"
    judged=(--references "$OUT_DIR/references.json")
fi

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
        --megatron-timeout 160 --history "$HISTORY" "${judged[@]}" \
        --report "$OUT_DIR/megatron.json"
fi

[[ $STEPS == *" validate "* ]] && step validate 200 "$PYTHON" -m imagebuild.inimage \
    --checks devices,gemm,attention,collectives,train --history "$HISTORY" "${judged[@]}" \
    --report "$OUT_DIR/validate.json"

[[ $STEPS == *" tune "* ]] || exit 0
step tune-shapes 60 "$PYTHON" -m imagebuild.inimage tune shapes --local \
    --out "$OUT_DIR/problems.csv"
step tune-gemm 100 "$PYTHON" -m imagebuild.inimage tune gemm "$OUT_DIR/problems.csv" \
    --method tunableop --top "$TUNE_TOP" --budget-s 60 --out "$OUT_DIR/bundle"
step tune-verify 70 "$PYTHON" -m imagebuild.inimage tune verify "$OUT_DIR/bundle" \
    --json "$OUT_DIR/verify.json"
