#!/usr/bin/env bash
# Issue 28 on a lent GPU in ONE device call: everything benchmarks/GPU.md asks for, in order of
# priority, each part under a share of one time budget, so that the call always ends inside
# its limit with what it measured (a lease is 15 minutes of device time, the machine's start
# included; one command at most 10).
#
# From the repository root, through the device tool (step 0 of GPU.md made .whl):
#   run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=600)
# On a CPU, as a dry run of the same calls with a tiny model (about 2 minutes on 2 cores):
#   GPU_SESSION_MODEL=mu/8 GPU_SESSION_IMAGE=32 GPU_SESSION_BATCHES="8 16 8 32" \
#     GPU_SESSION_ROOFLINE=1024 GPU_SESSION_WHEELS=0 OUT=/tmp/gpu_out bash benchmarks/gpu_session.sh
#
# Parts, in order of priority (each may start while its share of the budget is not spent; a
# bench_vit row starts only when it is expected to end in time, see bench_vit.py --deadline;
# a part that ends early leaves its time to the next):
#   1. versions, the GPU;
#   2. training and inference at batch 128: keras_vit on JAX and PyTorch and timm
#      (torch.compile), profiled (top kernels per row), a bf16 matmul roofline -> 50% of budget;
#   3. model.fit through the fine-tuning recipe against the bare step          -> 62%;
#   4. mixed_bfloat16 and mixed_float16 training on JAX, then PyTorch           -> 80%;
#   5. training at batch 256, inference at 1024 (keras_vit, timm)               -> 94%;
#   6. HF transformers at batch 128 (the second peer)                           -> 100%;
#   7. one table of every row (summary.md), printed last.
# $OUT gets 7 files: session.log (everything printed), b128.json, fit.json, mixed.log,
# large.json, hf.json, summary.md.
#
# Environment: GPU_SESSION_BUDGET_S (default 500: 8 min 20 s, leaving the call's 600 s limit
# room), GPU_SESSION_MODEL (B/16), GPU_SESSION_IMAGE (224), GPU_SESSION_BATCHES (four numbers:
# training and inference batch of parts 2 and 6, then of part 5; default "128 128 256 1024"),
# GPU_SESSION_ROOFLINE (8192: the roofline matmul's size), GPU_SESSION_PROFILE (1: profile
# part 2), GPU_SESSION_WHEELS (1: install .whl), PYTHON (python3); XLA_FLAGS and the like pass
# through.
set -u -o pipefail

BUDGET=${GPU_SESSION_BUDGET_S:-500}
MODEL=${GPU_SESSION_MODEL:-B/16}
IMAGE=${GPU_SESSION_IMAGE:-224}
read -r BT BI BT_LARGE BI_LARGE <<<"${GPU_SESSION_BATCHES:-128 128 256 1024}"
OUT=${OUT:-/tmp/gpu_session_out}
mkdir -p "$OUT"
START=$(date +%s)
at() { echo $((START + BUDGET * $1 / 100)); }  # the Unix time at $1 % of the budget
until_() { echo "until $((BUDGET * $1 / 100)) s, $(( $(date +%s) - START )) s gone"; }

# The GPU image lacks keras: its wheels travel in .whl (GPU.md, step 0); GPU_SESSION_WHEELS=0
# skips them (a dry run in this project's own environment).
if [ "${GPU_SESSION_WHEELS:-1}" = 1 ] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
PY=${PYTHON:-python3}
BENCH=("$PY" benchmarks/bench_vit.py --model "$MODEL" --image-size "$IMAGE" --precision bf16
       --runs 10 --warmup 3)
PROFILE=()
[ "${GPU_SESSION_PROFILE:-1}" = 1 ] && PROFILE=(--profile /tmp/gpu_session_profile)

{
echo "## 1. versions ($(date -u '+%Y-%m-%d %H:%M:%S UTC'), budget ${BUDGET} s)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
    --format=csv 2>&1 || echo "nvidia-smi: not found (no GPU: a dry run)"
# Keras' default backend is TensorFlow, which the GPU image lacks: name one to import keras.
KERAS_BACKEND=jax "$PY" - <<'EOF'
import importlib, importlib.util, sys
sys.path.insert(0, "benchmarks")
from _reference_imports import import_torchvision
import_torchvision()  # as bench_vit.py does before timm and transformers
for name in ("torch", "jax", "keras", "timm", "transformers", "tensorflow", "keras_vit"):
    if importlib.util.find_spec(name) is None:
        print(f"{name}: not installed")
        continue
    try:
        module = importlib.import_module(name)
        extra = ""
        if name == "jax":
            extra = f" {module.devices()}"
        if name == "torch":
            gpu = module.cuda.get_device_name() if module.cuda.is_available() else "no GPU"
            extra = f" (CUDA {module.version.cuda}, cuDNN {module.backends.cudnn.version()}, {gpu})"
        print(f"{name} {getattr(module, '__version__', '?')}{extra}")
    except Exception as e:  # say it and go on: the benchmarks say the rest
        print(f"{name}: import failed: {type(e).__name__}: {e}")
EOF

echo "## 2. train b$BT, infer b$BI ($(until_ 50))"
"${BENCH[@]}" --tasks train infer --batch-train "$BT" --batch-infer "$BI" --backends jax torch \
    --libs keras_vit timm --peer-compile true --roofline-size "${GPU_SESSION_ROOFLINE:-8192}" \
    "${PROFILE[@]}" --deadline "$(at 50)" --json "$OUT/b128.json"

echo "## 3. model.fit against the bare step ($(until_ 62))"
"${BENCH[@]}" --tasks fit --batch-train "$BT" --backends jax torch --libs keras_vit \
    --skip-roofline --peak-tflops 989 --fit-epochs 3 --fit-steps 15 \
    --deadline "$(at 62)" --json "$OUT/fit.json"

echo "## 4. mixed precision ($(until_ 80))"
for backend in jax torch; do
    seconds=$(( $(at 80) - $(date +%s) ))  # JAX gets half of what is left, PyTorch the rest
    [ "$backend" = jax ] && seconds=$((seconds / 2))
    if [ "$seconds" -lt 20 ]; then echo "$backend: skipped, out of time"; continue; fi
    KERAS_BACKEND=$backend timeout -k 5 "$seconds" "$PY" benchmarks/mixed_precision_check.py \
        --policies mixed_bfloat16 mixed_float16 --model "$MODEL" --image-size "$IMAGE" \
        --batch 32 --steps 16 || echo "$backend: exit code $? (124: out of time)"
done 2>&1 | tee "$OUT/mixed.log"

echo "## 5. train b$BT_LARGE, infer b$BI_LARGE ($(until_ 94))"
"${BENCH[@]}" --tasks train infer --batch-train "$BT_LARGE" --batch-infer "$BI_LARGE" \
    --backends jax torch --libs keras_vit timm --peer-compile true --skip-roofline \
    --peak-tflops 989 --deadline "$(at 94)" --json "$OUT/large.json"

echo "## 6. HF transformers, train b$BT, infer b$BI ($(until_ 100))"
"${BENCH[@]}" --tasks train infer --batch-train "$BT" --batch-infer "$BI" --backends torch \
    --libs hf --peer-compile true --skip-roofline --peak-tflops 989 \
    --deadline "$(at 100)" --json "$OUT/hf.json"
} 2>&1 | tee "$OUT/session.log"

{
echo
echo "## 7. summary ($(date -u '+%H:%M:%S UTC'), $(( $(date +%s) - START )) s in all)"
"$PY" benchmarks/bench_vit.py --from-json "$OUT/b128.json" "$OUT/hf.json" "$OUT/fit.json" \
    "$OUT/large.json"
grep -E '^(jax|torch|tensorflow) backend|^\| mixed|skipped|exit code' "$OUT/mixed.log"
} 2>&1 | tee "$OUT/summary.md" | tee -a "$OUT/session.log"
