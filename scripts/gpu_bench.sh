#!/usr/bin/env bash
# The torch backend on a CUDA GPU, eager and with CUDA graphs (model.cuda_graphs; no TensorRT
# needed: scripts/gpu_check.sh is TensorRT's). One run, each step under its own time limit so
# the whole script stays under 8 minutes (the limits add up to 7 min 40 s):
#   1. env: torch, CUDA, the GPU (and nvidia-smi where present)                        ~5 s
#   2. device parity tests (-m gpu): GPU plans = CPU plans (tests/decoding/test_device.py),
#      replayed graphs = eager (tests/backends/test_graphs.py, tests/bench/test_graphs.py)
#                                                                                  limit 170 s
#   3. the shipped tiny model: CPU tokens against the GPU's, eager and graphs, every
#      strategy, float32 and float64 (scripts/device_tokens.py)                   limit  80 s
#   4. the random-init tiny model, bench on the CPU and on the GPU (latency)       limit  50 s
#   5. Fast-dDrive's backbone shape (qwen2.5-vl-3b, random weights, bfloat16) on the GPU:
#      ar, scaffold_spec, rollouts, eager against graphs in one interleaved run, ms per plan,
#      ms per forward by window width, tokens/s, ratio to the bandwidth floor
#      (BANDWIDTH_GBS, default 4800: an H200's HBM3e; 3350 for an H100 SXM); the forwards by
#      width first, then the plan rounds, cut short at the limit with the finished rounds kept
#                                           limit 440 s less the earlier steps' time, >= 160 s
#   6. OUT_DIR/BENCHMARKS_gpu_torch.md: the section for docs/BENCHMARKS.md, the
#      GPU targets marked met / missed (scripts/gpu_bench_report.py)
# A step that fails or runs out of time is logged and the rest still run.
# Usage: scripts/gpu_bench.sh [--dry] [OUT_DIR] [PYTHON]
#   --dry: the same steps on the CPU with small shapes (qwen2.5-vl-test, float32, fewer
#   rounds), to prove the script end to end where no GPU is lent. No GPU number comes of it.
set -uo pipefail
DRY=0
if [[ "${1:-}" == "--dry" ]]; then DRY=1; shift; fi
PY="${2:-python3}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "${1:-gpu_bench}"
OUT_DIR="$(cd "${1:-gpu_bench}" && pwd)"
cd "${ROOT}"
export PYTHONPATH="${ROOT}/src${PYTHONPATH:+:${PYTHONPATH}}" PYTHONUNBUFFERED=1
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
BANDWIDTH_GBS="${BANDWIDTH_GBS:-4800}"
if (( DRY )); then  # a shared CPU is slow: the limits stretch (LIMIT_SCALE, default 10)
  DEVICE=cpu PRESET=qwen2.5-vl-test DTYPE=float32 ITERS=1 REPS=2 TINY_ITERS=1
  LIMIT_SCALE="${LIMIT_SCALE:-10}"
else
  DEVICE=cuda PRESET="${PRESET:-qwen2.5-vl-3b}" DTYPE=bfloat16 ITERS=2 REPS=10 TINY_ITERS=2
  LIMIT_SCALE="${LIMIT_SCALE:-1}"
fi
exec 3>&1  # the terminal: log lines go there even where a step's output is redirected
log() { echo "[gpu_bench $(date -u +%H:%M:%S)] $*" | tee -a "${OUT_DIR}/gpu_bench.log" >&3; }
step() {  # step NAME LIMIT_S COMMAND...: run under a time limit, log how it ended
  local name="$1" limit=$(( $2 * LIMIT_SCALE )); shift 2
  local start=${SECONDS}
  log "${name} (limit ${limit} s)"
  timeout --signal=INT --kill-after=10 "${limit}" "$@"
  local rc=$?
  log "${name}: rc=${rc} after $((SECONDS - start)) s$( ((rc == 124)) && echo ' (TIMED OUT)')"
  return 0
}
: > "${OUT_DIR}/gpu_bench.log"
log "out ${OUT_DIR}, device ${DEVICE}, dry ${DRY}"

"${PY}" - <<'PY' 2>&1 | tee "${OUT_DIR}/env.txt"
import importlib.util, torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
missing = [m for m in ("numpy", "yaml", "safetensors", "pytest") if importlib.util.find_spec(m) is None]
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", gpu,
      *(["MISSING", *missing] if missing else []))
PY
command -v nvidia-smi > /dev/null && nvidia-smi \
  --query-gpu=name,memory.total,clocks.max.memory,driver_version --format=csv \
  >> "${OUT_DIR}/env.txt" 2>&1

step "device parity tests" 170 "${PY}" -m pytest -q -m gpu -rs -p no:cacheprovider \
  tests/decoding/test_device.py tests/backends/test_graphs.py tests/bench/test_graphs.py \
  > "${OUT_DIR}/pytest.txt" 2>&1
tail -1 "${OUT_DIR}/pytest.txt" | tee -a "${OUT_DIR}/gpu_bench.log"

step "shipped tiny model tokens, cpu vs ${DEVICE}" 80 "${PY}" scripts/device_tokens.py \
  --device "${DEVICE}" --out "${OUT_DIR}/tokens.json" > "${OUT_DIR}/tokens.txt" 2>&1

bench_tiny() {
  for device in cpu $( [[ "${DEVICE}" != cpu ]] && echo "${DEVICE}" ); do
    # --backend torch: eager torch on both devices (auto would pick onnxruntime on the CPU)
    "${PY}" -m blockplan.cli bench --random-init tiny --iters "${TINY_ITERS}" --no-hf \
      --no-compute-floor --device "${device}" --backend torch --strategies ar,scaffold_spec,rollouts \
      --json "${OUT_DIR}/bench_tiny_${device}.json" > /dev/null || return 1
  done
}
export -f bench_tiny
export PY TINY_ITERS DEVICE OUT_DIR
step "bench tiny, cpu and ${DEVICE}" 50 bash -c bench_tiny

# The 3B step gets what the earlier steps left of the script's 440 s (at least its own 160):
# on the first H200 loan the earlier steps took 73 s of their 300 and this one ran out.
BIG_LIMIT=$(( 440 - SECONDS / LIMIT_SCALE )); (( BIG_LIMIT < 160 )) && BIG_LIMIT=160
step "bench ${PRESET} ${DTYPE} on ${DEVICE}, eager vs graphs" "${BIG_LIMIT}" "${PY}" -m blockplan.cli \
  bench --random-init "${PRESET}" --dtype "${DTYPE}" --device "${DEVICE}" --compare-graphs \
  --strategies ar,scaffold_spec,rollouts --iters "${ITERS}" --warmup 1 --no-hf \
  --forward-reps "${REPS}" --bandwidth-gbs "${BANDWIDTH_GBS}" \
  --json "${OUT_DIR}/bench_big.json" > "${OUT_DIR}/bench_big.txt" 2>&1

"${PY}" scripts/gpu_bench_report.py "${OUT_DIR}" $( ((DRY)) && echo --dry)
log "done: ${OUT_DIR}/BENCHMARKS_gpu_torch.md"
