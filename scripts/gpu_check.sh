#!/usr/bin/env bash
# One-shot TensorRT check for a machine with an NVIDIA GPU and TensorRT 10:
#   export -> build-engine (fp16, int8) -> gpu tests (build, cache, parity vs torch, CUDA
#   graphs) -> bench torch vs tensorrt. Everything lands in OUT_DIR (default ./gpu_check);
#   OUT_DIR/BENCHMARKS_gpu.md is the section to paste into docs/BENCHMARKS.md.
# Usage: scripts/gpu_check.sh [OUT_DIR] [PYTHON]
set -euo pipefail
PY="${2:-python3}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "${1:-gpu_check}"
OUT_DIR="$(cd "${1:-gpu_check}" && pwd)"
cd "${ROOT}"
export PYTHONPATH="${ROOT}/src${PYTHONPATH:+:${PYTHONPATH}}"
log() { echo "[gpu_check $(date -u +%H:%M:%S)] $*" | tee -a "${OUT_DIR}/gpu_check.log"; }

"${PY}" - <<'PY' | tee "${OUT_DIR}/env.txt"
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name(0))
import tensorrt
print("tensorrt", tensorrt.__version__)
PY

log "export (random-init tiny)"
"${PY}" -m blockplan.cli export --random-init tiny --out "${OUT_DIR}/onnx" > "${OUT_DIR}/export.json"
for precision in fp16 int8; do
  log "build-engine ${precision}"
  start=${SECONDS}
  "${PY}" -m blockplan.cli build-engine --onnx "${OUT_DIR}/onnx" --precision "${precision}" \
    --out "${OUT_DIR}/engines" > "${OUT_DIR}/engines_${precision}.json"
  echo "$((SECONDS - start)) s" > "${OUT_DIR}/build_${precision}.time"
done

log "gpu tests"
"${PY}" -m pytest -q "${ROOT}/tests/backends" -m "gpu or not gpu" -p no:cacheprovider \
  2>&1 | tee "${OUT_DIR}/pytest.txt" | tail -5

for backend in torch tensorrt; do
  log "bench ${backend}"
  "${PY}" -m blockplan.cli bench --random-init tiny --iters 5 --no-hf --backend "${backend}" \
    --json "${OUT_DIR}/bench_${backend}.json" > /dev/null
done

"${PY}" - "${OUT_DIR}" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
env = (out / "env.txt").read_text().strip().replace("\n", "; ")
lines = ["### TensorRT (scripts/gpu_check.sh)", "", f"`{env}`", "",
         "| strategy | torch p50 (ms) | tensorrt fp16 p50 (ms) | speed-up |", "|---|---|---|---|"]
t = json.loads((out / "bench_torch.json").read_text())["strategies"]
r = json.loads((out / "bench_tensorrt.json").read_text())["strategies"]
for name in t:
    a, b = t[name]["latency_ms"]["p50"], r[name]["latency_ms"]["p50"]
    lines.append(f"| `{name}` | {a} | {b} | {a / b:.2f}x |")
builds = {p: (out / f"build_{p}.time").read_text().strip() for p in ("fp16", "int8")}
lines += ["", f"Engine builds: {builds}. Tests: "
          + (out / "pytest.txt").read_text().strip().splitlines()[-1], "",
          "```bash", "scripts/gpu_check.sh gpu_check", "```", ""]
(out / "BENCHMARKS_gpu.md").write_text("\n".join(lines))
print("\n".join(lines))
PY
log "done: ${OUT_DIR}/BENCHMARKS_gpu.md"
