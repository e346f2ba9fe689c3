#!/usr/bin/env bash
# The torch backend on a CUDA GPU (no TensorRT needed; scripts/gpu_check.sh is TensorRT's):
#   1. device tests: plans on the GPU equal the CPU's token for token (tests/decoding/test_device.py)
#   2. the tiny model, CPU vs GPU (one bench each)
#   3. Fast-dDrive's backbone shape (qwen2.5-vl-3b, random weights, bfloat16) on the GPU:
#      ar, scaffold_spec and rollouts, beside the paper's H100 numbers.
# Everything lands in OUT_DIR (default ./gpu_bench); OUT_DIR/BENCHMARKS_gpu_torch.md is the
# section to paste into docs/BENCHMARKS.md. Estimated (not yet measured) a few minutes on one
# H100/H200; the dry run below took 5.5 min on a shared 2-core CPU.
# Usage: scripts/gpu_bench.sh [OUT_DIR] [PYTHON]
# Dry run of the script itself on a CPU: DEVICE=cpu PRESET=qwen2.5-vl-test scripts/gpu_bench.sh
set -euo pipefail
PY="${2:-python3}"
DEVICE="${DEVICE:-cuda}"
PRESET="${PRESET:-qwen2.5-vl-3b}"
DTYPE="${DTYPE:-bfloat16}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "${1:-gpu_bench}"
OUT_DIR="$(cd "${1:-gpu_bench}" && pwd)"
cd "${ROOT}"
export PYTHONPATH="${ROOT}/src${PYTHONPATH:+:${PYTHONPATH}}" PYTHONUNBUFFERED=1
log() { echo "[gpu_bench $(date -u +%H:%M:%S)] $*" | tee -a "${OUT_DIR}/gpu_bench.log"; }

"${PY}" - <<'PY' | tee "${OUT_DIR}/env.txt"
import torch
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpu", gpu)
PY

log "device tests"
"${PY}" -m pytest -q tests/decoding/test_device.py -p no:cacheprovider \
  2>&1 | tee "${OUT_DIR}/pytest.txt" | tail -3 || log "device tests FAILED: see pytest.txt"

for device in cpu "${DEVICE}"; do
  log "bench tiny on ${device}"
  "${PY}" -m blockplan.cli bench --random-init tiny --iters 3 --no-hf --device "${device}" \
    --strategies ar,scaffold_spec,rollouts \
    --json "${OUT_DIR}/bench_tiny_${device}.json" > /dev/null
done

log "bench ${PRESET} ${DTYPE} on ${DEVICE}"
"${PY}" -m blockplan.cli bench --random-init "${PRESET}" --dtype "${DTYPE}" --device "${DEVICE}" \
  --strategies ar,scaffold_spec,rollouts --iters 3 --warmup 1 --no-hf \
  --json "${OUT_DIR}/bench_3b.json" > /dev/null

"${PY}" - "${OUT_DIR}" "${DEVICE}" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
env = (out / "env.txt").read_text().strip()
big = json.loads((out / "bench_3b.json").read_text())
paper = {"ar": "7855 ms, 51.6 tok/s", "scaffold_spec": "1919 ms, 210.4 tok/s"}
m = big["model"]
lines = ["### Torch backend on a GPU (scripts/gpu_bench.sh)", "", f"`{env}`", "",
         f"{m['source']}, {m['dtype']} on {m['device']}, prompt {m['prompt_tokens']} tokens, "
         f"answer {m['answer_tokens']} ({m['editable_tokens']} editable), 3 timed rounds:", "",
         "| strategy | forwards / plan | p50 ms | tok/s | paper (H100, trained weights) |",
         "|---|---|---|---|---|"]
for name, s in big["strategies"].items():
    lines.append(f"| `{name}` | {s['forwards_per_plan']} | {s['latency_ms']['p50']} | "
                 f"{s['tokens_per_s']} | {paper.get(name, '')} |")
lines += ["", "Stages p50 (ms): " + json.dumps(big["stage_ms_p50"]), "",
          f"scaffold spec identical to AR: {big.get('scaffold_spec_identical_to_ar_fraction')}; "
          f"tokens per draft step {big.get('scaffold_spec_tokens_per_step')} (random weights "
          "draft badly: the paper's 4.90 needs the trained model)", ""]
tiny = json.loads((out / "bench_tiny_cpu.json").read_text())
cpu = tiny["strategies"]
gpu = json.loads((out / f"bench_tiny_{sys.argv[2]}.json").read_text())["strategies"]
lines += [f"Random-init tiny ({tiny['model']['params']} parameters), p50 ms:", "", f"| strategy | cpu | {sys.argv[2]} |", "|---|---|---|"]
for name in cpu:
    lines.append(f"| `{name}` | {cpu[name]['latency_ms']['p50']} | "
                 f"{gpu[name]['latency_ms']['p50']} |")
lines += ["", "Device tests: " + (out / "pytest.txt").read_text().strip().splitlines()[-1],
          "", "```bash", "scripts/gpu_bench.sh gpu_bench", "```", ""]
(out / "BENCHMARKS_gpu_torch.md").write_text("\n".join(lines))
print("\n".join(lines))
PY
log "done: ${OUT_DIR}/BENCHMARKS_gpu_torch.md"
