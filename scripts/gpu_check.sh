#!/usr/bin/env bash
# GPU check of the MLP backends (issue 3), in one go, writing everything to OUT_DIR:
#
#   scripts/gpu_check.sh OUT_DIR
#
# 1. kernels_fp32_bf16/  python -m mtan_s1s2.bench, data=synthetic_bench, every backend:
#                        the users' 1x1 projection (500x128x64x64), the model's MLP blocks,
#                        one whole training step; fp32 at MATCHED precision
#                        (matmul_precision=highest: no TF32 in matmuls nor in cuDNN) and
#                        bf16 autocast; forward and forward+backward.
# 2. kernels_tf32_defaults/  the projection with PyTorch's default flags (fp32 matmuls,
#                        TF32 cuDNN convolutions): how much of a "conv is faster" gap is
#                        precision rather than layout.
# 3. epochs_fp32/        training throughput per backend (auto included), each in a fresh
#                        process, bench-sized data served from memory, epoch 0 excluded.
# 4. epochs_bf16/        the same in bf16-mixed, if the time budget allows.
#
# Needs a CUDA device (fails fast without one). If mtan_s1s2 with a CUDA torch is not
# importable: wheels in $WHEELS (default .whl, fetched beforehand with scripts/gpu_wheels.sh
# on a machine with a package index) are installed into a folder on PYTHONPATH and src/ is
# put on it too (for GPU machines without a package index); failing that, a virtual
# environment ($VENV, default ~/.cache/mtan_s1s2/venv-gpu) is created and torch and this
# package are pip-installed into it. The measurements take under 5 minutes on
# one H200; installing torch, when needed, comes on top. Environment knobs:
#   PYTHON=python3        interpreter to try first
#   WHEELS=.whl           folder of wheels to install offline (scripts/gpu_wheels.sh)
#   VENV=path             where to create the virtual environment if one is needed
#   BUDGET_S=270          seconds for the measurements (optional steps are skipped past it)
#   GPU_CHECK_COMPILE=1   also time torch.compile on the projection (adds about a minute)
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: scripts/gpu_check.sh OUT_DIR" >&2
    exit 2
fi
REPO="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
cd "$REPO"
BUDGET_S="${BUDGET_S:-270}"
LOG="$OUT/gpu_check.log"
: > "$LOG"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

# --- 0. a CUDA device, or stop here -------------------------------------------------------
if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > "$OUT/gpus.txt" 2>&1 || ! grep -q "^GPU" "$OUT/gpus.txt"; then
    echo "ERROR: no CUDA device found (nvidia-smi missing or lists no GPU). scripts/gpu_check.sh needs an NVIDIA GPU; on CPU run 'python -m mtan_s1s2.bench' instead." | tee -a "$LOG" >&2
    exit 3
fi
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
log "GPU: $(head -n1 "$OUT/gpus.txt")"

# --- 1. python with a CUDA torch and this package ----------------------------------------
PY="${PYTHON:-python3}"
check_py() { "$1" -c "import torch, mtan_s1s2; assert torch.cuda.is_available()" > /dev/null 2>&1; }
# Offline GPU machines: wheels fetched elsewhere with scripts/gpu_wheels.sh, and src/ on the
# path instead of an install of this package (no package index, no build needed).
WHEELS="${WHEELS:-$REPO/.whl}"
if ! check_py "$PY" && compgen -G "$WHEELS/*.whl" > /dev/null; then
    SITE="${SITE:-/tmp/mtan_s1s2_site}"
    log "installing $(ls "$WHEELS"/*.whl | wc -l) wheel(s) from $WHEELS into $SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl 2>&1 | tee -a "$LOG"
    export PYTHONPATH="$SITE:$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
elif ! check_py "$PY" && "$PY" -c "import torch, hydra, lightning, einops, torchmetrics" > /dev/null 2>&1; then
    export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! check_py "$PY"; then
    VENV="${VENV:-$HOME/.cache/mtan_s1s2/venv-gpu}"
    log "mtan_s1s2 with CUDA torch not importable from $PY; setting up $VENV"
    [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
    PY="$VENV/bin/python"
    if ! "$PY" -c "import torch; assert torch.cuda.is_available()" > /dev/null 2>&1; then
        log "pip install torch (CUDA build)"
        "$PY" -m pip install --quiet torch 2>&1 | tee -a "$LOG"
    fi
    "$PY" -m pip install --quiet -e . 2>&1 | tee -a "$LOG"
    if ! check_py "$PY"; then
        echo "ERROR: torch in $VENV cannot use the GPU: $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1)" | tee -a "$LOG" >&2
        exit 4
    fi
fi
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$LOG"

START=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - START))); }
STATUS=0
# run NAME SECONDS ARGS...: one benchmark invocation, its console output in OUT/NAME.log
run() {
    local name="$1" limit="$2"
    shift 2
    log "$name (limit ${limit}s): python -m mtan_s1s2.bench $*"
    if timeout --kill-after=10 "$limit" "$PY" -m mtan_s1s2.bench hydra.run.dir="$OUT/$name" paths.log_dir="$OUT/logs" "$@" > "$OUT/$name.log" 2>&1; then
        log "$name done"
    else
        STATUS=1
        log "$name FAILED or timed out (exit $?); see $OUT/$name.log"
    fi
}
# Shorter timings than the interactive defaults: >= 4 blocks, 0.2 to 1 s per measurement.
TIMER=(bench.timer.warmup=3 bench.timer.min_run_time=0.2 bench.timer.max_run_time=1.0)

# --- 2. kernels: fp32 at matched precision and bf16 (the main table) ---------------------
run kernels_fp32_bf16 150 data=synthetic_bench matmul_precision=highest \
    'bench.precisions=[fp32,bf16]' "${TIMER[@]}"

# --- 3. the projection with PyTorch's default TF32 flags (conv TF32, matmul fp32) ------
run kernels_tf32_defaults 40 matmul_precision=null 'bench.suites=[projection]' \
    'bench.precisions=[fp32]' "${TIMER[@]}"

if [[ "${GPU_CHECK_COMPILE:-0}" == "1" && $(left) -gt 150 ]]; then
    run kernels_compiled 90 matmul_precision=highest 'bench.suites=[projection]' \
        'bench.precisions=[fp32,bf16]' 'bench.compile=[false,true]' "${TIMER[@]}"
fi

# --- 4. training throughput per backend (fresh process each, epoch 0 excluded) ----------
EPOCHS=(bench.mode=epochs bench.epochs.data=synthetic_bench bench.epochs.in_memory=true
        bench.epochs.max_epochs=3 bench.epochs.limit_train_batches=15 bench.epochs.timeout_s=60)
if [[ $(left) -gt 60 ]]; then
    run epochs_fp32 $(( $(left) > 150 ? 150 : $(left) )) matmul_precision=highest "${EPOCHS[@]}" bench.epochs.precision=32-true
else
    log "skipping epochs_fp32: $(left)s left of BUDGET_S=$BUDGET_S"; STATUS=1
fi
if [[ $(left) -gt 60 ]]; then
    run epochs_bf16 $(left) matmul_precision=highest "${EPOCHS[@]}" bench.epochs.precision=bf16-mixed
else
    log "skipping epochs_bf16: $(left)s left of BUDGET_S=$BUDGET_S"
fi

# --- 5. one place to read the results ----------------------------------------------------
"$PY" - "$OUT" > "$OUT/SUMMARY.txt" 2>&1 <<'EOF' || true
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
for f in sorted(out.glob("*/bench.json")):
    rows = json.loads(f.read_text())["rows"]
    if not rows:
        continue
    head = rows[0]
    print(f"== {f.parent.name}: {head.get('gpu')}, torch {head.get('torch')}, float32 matmul "
          f"{head.get('float32_matmul_precision')}, cuDNN TF32 {head.get('cudnn_allow_tf32')}")
    for r in rows:
        if r["suite"] in ("projection", "train_step") or r["case"] == "sum of MLP blocks":
            ratio = r.get("speedup_vs_linear")
            mode = "compiled" if r["compile"] else "eager"
            print(f"  {r['suite']:10s} {r['case'][:24]:24s} {r['pass']:16s} {r['precision']:4s} {mode:8s} "
                  f"{r['backend']:14s} {r['median_ms']:10.3f} ms  " + (f"x{ratio:.2f} vs linear" if ratio else ""))
for f in sorted(out.glob("*/epochs_summary.json")):
    print(f"== {f.parent.name}: training samples/s (median of the epochs after epoch 0)")
    for r in json.loads(f.read_text())["rows"]:
        sps = r.get("samples_per_s")
        if not sps:
            print(f"  {r['backend']:14s} failed")
            continue
        print(f"  {r['backend']:14s} trained as {str(r.get('trained_backend')):14s} {sps:9.1f} samples/s  "
              f"x{r['speedup_vs_linear'] or 0:.2f} vs linear  {r['fraction_of_fastest'] or 0:.1%} of fastest")
EOF
cat "$OUT/SUMMARY.txt" | tee -a "$LOG"
log "measurements took $((SECONDS - START)) s; results in $OUT (status $STATUS)"
exit $STATUS
