#!/usr/bin/env bash
# The robot policy in closed loop on every Meta-World task, next to the scripted expert and
# the blind baseline (docs/BENCHMARKS.md "Robots"): one process per task, then a table.
#   scripts/robot_eval.sh MODEL_DIR DATA_DIR OUT_DIR [EPISODES] [FIRST_SEED]
set -euo pipefail
model=${1:?model folder}; data=${2:?robot data set}; out=${3:?output folder}
episodes=${4:-10}; seed=${5:-900000}
mkdir -p "$out"
for task in reach push pick-place; do
  blockplan closed-loop --embodiment robot --task "$task" --episodes "$episodes" --seed "$seed" \
    --model "$model" --data "$data" --max-steps 120 --json "$out/$task.json" --no-progress \
    >"$out/$task.log" 2>&1 &
done
wait
python - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| task | model | expert | blind | model / expert |")
print("|---|---|---|---|---|")
for task in ("reach", "push", "pick-place"):
    d = json.loads((out / f"{task}.json").read_text())
    cell = lambda p: f"{d[p]['success_rate']:.0%} ({d[p]['mean_steps']:.0f} steps)"
    ratio = d["model"]["success_rate"] / max(d["expert"]["success_rate"], 1e-9)
    print(f"| {task} | {cell('model')} | {cell('expert')} | {cell('blind')} | {ratio:.2f} |")
PY
