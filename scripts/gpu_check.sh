#!/usr/bin/env bash
# GPU check of the MLP backends, precisions and compilation, in one go, writing everything to
# OUT_DIR and one CSV of every measurement (OUT_DIR/all.csv):
#
#   scripts/gpu_check.sh [--dry-run] OUT_DIR
#
# 1. kernels/        python -m mtan_s1s2.bench, data=synthetic_bench, every backend: the
#                    users' 1x1 projection (500x128x64x64), the model's MLP blocks, one whole
#                    training step; fp32 at MATCHED precision (matmul_precision=highest: no
#                    TF32 in matmuls nor in cuDNN) and bf16 autocast; eager and compiled;
#                    forward and forward+backward; FLOPs and the fraction of the GEMM peak.
# 2. kernels_tf32/   the projection and training step with TF32 allowed (matmul_precision=high)
#                    and with PyTorch's default flags (TF32 convolutions only).
# 3. scaling/        a training step against dates, patch size and batch size, per backend.
# 4. epochs_fp32/    training throughput per backend (auto included), fresh process each,
#    epochs_bf16/    bench-sized data in memory, epoch 0 excluded; then bf16-mixed.
#    epochs_defaults/ the plain commands as users run them: `python train.py` (mlp=auto,
#                    precision auto, model.compile=auto) and `python train.py mlp=conv`, beside
#                    fp32 linear eager (the former explicit configuration) and compiled
#                    channels_last bf16; the one-line choice of each run is in its log.
# 5. compile_parity/ python -m mtan_s1s2.bench.compile_parity: one training step per backend,
#                    compiled vs eager, fp32 and bf16 autocast: finite and within tolerance
#                    (a mismatch fails the check).
#
# --dry-run runs the same steps on the CPU with tiny shapes and one timed call each (tests
# keep the script working without a GPU); without it, a CUDA device is required.
# If mtan_s1s2 with a CUDA torch is not importable: wheels in $WHEELS (default .whl, fetched
# beforehand with scripts/gpu_wheels.sh on a machine with a package index) are installed into
# a folder on PYTHONPATH and src/ is put on it too (for GPU machines without a package index);
# failing that, a virtual environment ($VENV, default ~/.cache/mtan_s1s2/venv-gpu) is created
# and torch and this package are pip-installed into it. Environment knobs:
#   PYTHON=python3        interpreter to try first
#   WHEELS=.whl           folder of wheels to install offline (scripts/gpu_wheels.sh)
#   VENV=path             where to create the virtual environment if one is needed
#   BUDGET_S=420          seconds for the measurements (later steps are skipped past it)
set -euo pipefail

DRY_RUN=0
if [[ "${1:-}" == "--dry-run" ]]; then
    DRY_RUN=1
    shift
fi
if [[ $# -ne 1 ]]; then
    echo "usage: scripts/gpu_check.sh [--dry-run] OUT_DIR" >&2
    exit 2
fi
REPO="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
cd "$REPO"
BUDGET_S="${BUDGET_S:-420}"
LOG="$OUT/gpu_check.log"
: > "$LOG"
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$LOG"; }

# --- 0. a CUDA device, or stop here -------------------------------------------------------
if [[ $DRY_RUN == 1 ]]; then
    log "dry run on the CPU: tiny shapes, one timed call per measurement"
elif ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > "$OUT/gpus.txt" 2>&1 || ! grep -q "^GPU" "$OUT/gpus.txt"; then
    echo "ERROR: no CUDA device found (nvidia-smi missing or lists no GPU). scripts/gpu_check.sh needs an NVIDIA GPU; on CPU run 'python -m mtan_s1s2.bench' instead." | tee -a "$LOG" >&2
    exit 3
fi
if [[ $DRY_RUN == 0 ]]; then
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
    log "GPU: $(head -n1 "$OUT/gpus.txt")"
fi

# --- 1. python with a CUDA torch and this package ----------------------------------------
PY="${PYTHON:-python3}"
if [[ $DRY_RUN == 1 ]]; then
    check_py() { "$1" -c "import torch, mtan_s1s2" > /dev/null 2>&1; }
else
    check_py() { "$1" -c "import torch, mtan_s1s2; assert torch.cuda.is_available()" > /dev/null 2>&1; }
fi
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
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')" | tee -a "$LOG"

START=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - START))); }
STATUS=0
# run NAME SECONDS ARGS...: one benchmark invocation, its console output in OUT/NAME.log
run() {
    local name="$1" limit="$2"
    shift 2
    log "$name (limit ${limit}s): python -m mtan_s1s2.bench $*"
    local rc=0
    timeout --kill-after=10 "$limit" "$PY" -m mtan_s1s2.bench hydra.run.dir="$OUT/$name" paths.log_dir="$OUT/logs" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
    if [[ $rc == 0 ]]; then
        log "$name done"
    else
        STATUS=1
        log "$name FAILED (exit $rc; 124 = timed out after ${limit}s); see $OUT/$name.log"
    fi
}
if [[ $DRY_RUN == 1 ]]; then
    DEVICE=(bench.device=cpu)
    DATA=data=synthetic_tiny
    TIMER=(bench.timer.method=once bench.timer.warmup=1)
    TINY=(model.net.d_model=8 model.net.embed_time=8 model.net.num_ref_times=4 'model.net.head_hidden=[16,16]')
    PROJECTION=('bench.projection.shape=[2,8,4,4]')
    PRECISIONS='bench.precisions=[32-true]'
    SCALING=('bench.scaling.backends=[channels_last]' 'bench.scaling.dates=[4,8]' 'bench.scaling.patch_sizes=[]'
             'bench.scaling.batch_sizes=[]' 'bench.scaling.reference={dates: 4, patch: 4, batch: 2}'
             bench.scaling.timer.method=once)
    EPOCHS=(bench.mode=epochs bench.epochs.data=synthetic_tiny bench.epochs.max_epochs=2
            bench.epochs.limit_train_batches=1 'bench.epochs.backends=[linear,channels_last]'
            "bench.epochs.overrides=['model.net.d_model=8','model.net.num_ref_times=4']")
    COMMANDS="bench.epochs.commands={fp32_linear: ['mlp=linear', 'trainer.precision=32-true', 'model.compile=false'], default: [], conv: ['mlp=conv']}"
    SUITES=('bench.suites=[projection,train_step]')   # compiled: the projection only (CPU compiles are slow)
    COMPILE_SUITES=('bench.suites=[projection]')
else
    DEVICE=(bench.device=cuda)
    DATA=data=synthetic_bench
    # Shorter timings than the interactive defaults: >= 4 blocks, 0.2 to 1 s per measurement.
    TIMER=(bench.timer.warmup=3 bench.timer.min_run_time=0.2 bench.timer.max_run_time=1.0)
    TINY=()
    PROJECTION=('bench.projection.shape=[500,128,64,64]')
    PRECISIONS='bench.precisions=[32-true,bf16-mixed]'
    SCALING=(bench.scaling.reference.batch=16 'bench.scaling.batch_sizes=[4,16,64]'
             bench.scaling.timer.min_run_time=0.2 bench.scaling.timer.max_run_time=1.0)
    EPOCHS=(bench.mode=epochs bench.epochs.data=synthetic_bench bench.epochs.in_memory=true
            bench.epochs.max_epochs=3 bench.epochs.limit_train_batches=15 bench.epochs.timeout_s=90)
    COMMANDS="bench.epochs.commands={fp32_linear: ['mlp=linear', 'trainer.precision=32-true', 'model.compile=false'], default: [], conv: ['mlp=conv'], compiled_channels_last_bf16: ['mlp=channels_last', 'trainer.precision=bf16-mixed', 'model.compile=true']}"
    SUITES=('bench.suites=[projection,blocks,train_step]')
    COMPILE_SUITES=('bench.suites=[projection,blocks,train_step]')
fi
# budget SECONDS: a step's time limit, at most what is left (doubled in a dry run: CPUs are slower)
budget() { local want=$(( $1 * (DRY_RUN + 1) )); local l; l=$(left); echo $(( l < want ? l : want )); }

# --- 2. kernels: fp32 at matched precision and bf16, eager then compiled (the main table) --
run kernels "$(budget 100)" "$DATA" matmul_precision=highest "${DEVICE[@]}" "$PRECISIONS" "${SUITES[@]}" \
    'bench.compile=[false]' "${PROJECTION[@]}" "${TIMER[@]}" "${TINY[@]}"
run kernels_compiled "$(budget 150)" "$DATA" matmul_precision=highest "${DEVICE[@]}" "$PRECISIONS" \
    "${COMPILE_SUITES[@]}" 'bench.compile=[true]' "${PROJECTION[@]}" "${TIMER[@]}" "${TINY[@]}"

# --- 3. TF32: allowed everywhere, then PyTorch's default flags (cuDNN convolutions only) --
if [[ $(left) -gt 30 ]]; then
    run kernels_tf32 "$(budget 40)" "$DATA" matmul_precision=high "${DEVICE[@]}" 'bench.suites=[projection,train_step]' \
        'bench.precisions=[32-true]' "${PROJECTION[@]}" "${TIMER[@]}" "${TINY[@]}"
    run kernels_tf32_defaults "$(budget 30)" "$DATA" matmul_precision=null "${DEVICE[@]}" 'bench.suites=[projection]' \
        'bench.precisions=[32-true]' "${PROJECTION[@]}" "${TIMER[@]}" "${TINY[@]}"
fi

# --- 4. scaling: a training step against dates, patch size and batch size ---------------
if [[ $(left) -gt 60 ]]; then
    run scaling "$(budget 90)" bench.mode=scaling "${DEVICE[@]}" "${SCALING[@]}" "${TINY[@]}"
else
    log "skipping scaling: $(left)s left of BUDGET_S=$BUDGET_S"; STATUS=1
fi

# --- 5. training throughput per backend (fresh process each, epoch 0 excluded) ----------
if [[ $(left) -gt 60 ]]; then
    run epochs_fp32 "$(budget 120)" matmul_precision=highest "${DEVICE[@]}" "${EPOCHS[@]}" bench.epochs.precision=32-true
else
    log "skipping epochs_fp32: $(left)s left of BUDGET_S=$BUDGET_S"; STATUS=1
fi
if [[ $(left) -gt 60 ]]; then
    run epochs_defaults "$(budget 150)" matmul_precision=highest "${DEVICE[@]}" "${EPOCHS[@]}" "$COMMANDS"
else
    log "skipping epochs_defaults: $(left)s left of BUDGET_S=$BUDGET_S"; STATUS=1
fi
if [[ $DRY_RUN == 0 && $(left) -gt 60 ]]; then
    run epochs_bf16 "$(left)" matmul_precision=highest "${DEVICE[@]}" "${EPOCHS[@]}" bench.epochs.precision=bf16-mixed
fi

# --- 6. compiled vs eager training step per backend, fp32 and bf16 (finite, within tolerance) ---
if [[ $(left) -gt 30 ]]; then
    PARITY=(--device "${DEVICE[0]#bench.device=}" --precisions fp32 bf16)
    [[ $DRY_RUN == 1 ]] && PARITY+=(--tiny --backends conv)   # CPU compiles are slow: the conv backend only
    limit=$(budget 120)
    log "compile_parity (limit ${limit}s): python -m mtan_s1s2.bench.compile_parity ${PARITY[*]}"
    rc=0
    timeout --kill-after=10 "$limit" "$PY" -m mtan_s1s2.bench.compile_parity "${PARITY[@]}" \
        --out "$OUT/compile_parity" > "$OUT/compile_parity.log" 2>&1 || rc=$?
    if [[ $rc == 0 ]]; then
        log "compile_parity done"
    else
        STATUS=1
        log "compile_parity FAILED (exit $rc: 1 = a backend not finite or off eager, 124 = timed out); see $OUT/compile_parity.log"
    fi
else
    log "skipping compile_parity: $(left)s left of BUDGET_S=$BUDGET_S"; STATUS=1
fi

# --- 7. one place to read the results: all.csv and SUMMARY.txt ----------------------------------------------------
"$PY" - "$OUT" > "$OUT/SUMMARY.txt" 2>&1 <<'EOF' || true
import json, sys
from pathlib import Path

import csv

out = Path(sys.argv[1])
every = []
for name in ("bench", "scaling", "epochs_summary", "compile_parity"):
    for f in sorted(out.glob(f"*/{name}.json")):
        every += [{"run": f.parent.name, "file": name, **r} for r in json.loads(f.read_text())["rows"]]
columns = list(dict.fromkeys(k for r in every for k in r))
with open(out / "all.csv", "w", newline="") as fh:
    writer = csv.DictWriter(fh, fieldnames=columns)
    writer.writeheader()
    for r in every:
        writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})
print(f"all.csv: {len(every)} rows")
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
            frac = r.get("fraction_of_peak")
            print(f"  {r['suite']:10s} {r['case'][:24]:24s} {r['pass']:16s} {r['precision']:4s} {mode:8s} "
                  f"{r['backend']:14s} {r['median_ms']:10.3f} ms  " + (f"x{ratio:.2f} vs linear  " if ratio else "")
                  + (f"{frac:.0%} of GEMM peak" if frac else ""))
for f in sorted(out.glob("*/epochs_summary.json")):
    print(f"== {f.parent.name}: training samples/s (median of the epochs after epoch 0)")
    for r in json.loads(f.read_text())["rows"]:
        sps = r.get("samples_per_s")
        if not sps:
            print(f"  {r['backend']:14s} failed")
            continue
        print(f"  {r['backend']:14s} trained as {str(r.get('trained_backend')):14s} {sps:9.1f} samples/s  "
              f"x{r['speedup_vs_linear'] or 0:.2f} vs linear  {r['fraction_of_fastest'] or 0:.1%} of fastest")
for f in sorted(out.glob("*/compile_parity.json")):
    print("== compile_parity: one training step, compiled vs eager (relative difference of loss / gradient norm)")
    for r in json.loads(f.read_text())["rows"]:
        verdict = "ok" if r["ok"] else ("MISMATCH" if r["finite"] else "NOT FINITE")
        print(f"  {r['backend']:14s} {r['precision']:5s} loss {r['compiled_loss']:.5f} vs {r['eager_loss']:.5f}  "
              f"{r['loss_rel_diff']:.1e} / {r['grad_rel_diff']:.1e} (rtol {r['rtol']:g})  {verdict}")
EOF
cat "$OUT/SUMMARY.txt" | tee -a "$LOG"
log "measurements took $((SECONDS - START)) s; results in $OUT (status $STATUS)"
exit $STATUS
