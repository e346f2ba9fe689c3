#!/usr/bin/env bash
# The robot policy in closed loop on Meta-World tasks, next to the scripted expert and the
# blind baseline (docs/BENCHMARKS.md "Robots"): one process per task, then a table.
#   scripts/robot_eval.sh MODEL_DIR DATA_DIR OUT_DIR [EPISODES] [FIRST_SEED]
# Environment: TASKS (default "reach push pick-place"; any of the MT10 ten), POLICIES
# (default "model expert blind"), MAX_STEPS (120), JOBS (tasks at once, 3).
set -euo pipefail
model=${1:?model folder}; data=${2:?robot data set}; out=${3:?output folder}
episodes=${4:-10}; seed=${5:-900000}
tasks=${TASKS:-reach push pick-place}; policies=${POLICIES:-model expert blind}
max_steps=${MAX_STEPS:-120}; jobs=${JOBS:-3}
mkdir -p "$out"
for task in $tasks; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  # shellcheck disable=SC2086  # one word per policy
  blockplan closed-loop --embodiment robot --task "$task" --episodes "$episodes" --seed "$seed" \
    --model "$model" --data "$data" --max-steps "$max_steps" --policies $policies \
    --json "$out/$task.json" --no-progress >"$out/$task.log" 2>&1 &
done
wait
python - "$out" $tasks <<'PY'
import json, sys
from pathlib import Path
out, tasks = Path(sys.argv[1]), sys.argv[2:]
docs = {t: json.loads((out / f"{t}.json").read_text()) for t in tasks}
policies = [p for p in ("model", "expert", "blind") if p in docs[tasks[0]]]
ratio = "model" in policies and "expert" in policies
print("| task | " + " | ".join(policies) + (" | model / expert |" if ratio else " |"))
print("|---|" + "---|" * (len(policies) + ratio))
for task, d in docs.items():
    cell = lambda p: f"{d[p]['success_rate']:.0%} ({d[p]['mean_steps']:.0f} steps)"
    row = f"| {task} | " + " | ".join(cell(p) for p in policies) + " |"
    if ratio:
        row += f" {d['model']['success_rate'] / max(d['expert']['success_rate'], 1e-9):.2f} |"
    print(row)
PY
