#!/usr/bin/env bash
# The planner node in a live ROS 2 graph, measured (docs/BENCHMARKS.md "The node in a live ROS 2
# graph"): colcon-builds the package, launches planner.launch.py, plays a simulated bag into it
# with `blockplan play --observe`, and prints the observer's summary: trajectory period
# p50/p99, end-to-end latency (newest camera frame out -> the plan's reasoning in), and the
# node's CPU besides inference (from its /diagnostics).
#
#   scripts/live_bench.sh [--clock | --restamp] [BAG]
#
# --clock (default): the node on sim time, the bag with /clock; --restamp: the node on wall
# time, the bag's stamps moved to now. Without BAG a 20 s highway bag is simulated. Needs the
# ROS 2 runtime: ROS2=DIR (default ../shared/ros2) holds env.sh. Outputs in $OUT (default
# /tmp/blockplan-live-bench): observed.json, reasoning.jsonl, launch.log, play.log.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=--clock
if [[ "${1:-}" == --clock || "${1:-}" == --restamp ]]; then MODE=$1; shift; fi
BAG=${1:-}
ROS2=${ROS2:-../shared/ros2}
PY=${PY:-.venv/bin/python}
OUT=${OUT:-/tmp/blockplan-live-bench}
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-77}
mkdir -p "$OUT"
# shellcheck disable=SC1091
source "$ROS2/env.sh"
PY="$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")"  # absolute, symlink kept (a venv)
export PATH="$(dirname "$PY"):$PATH"

"$(dirname "$PY")/colcon" build --base-paths ros2_ws/src --build-base "$OUT/build" \
  --install-base "$OUT/install" --event-handlers console_direct- >"$OUT/colcon.log" 2>&1
PREFIX="$OUT/install/blockplan"
export AMENT_PREFIX_PATH="$PREFIX:$AMENT_PREFIX_PATH"
export PYTHONPATH="$PREFIX/lib/python3.11/site-packages:$PYTHONPATH"
export ROS_LOG_DIR="$OUT/roslog" RCUTILS_COLORIZED_OUTPUT=0 PYTHONUNBUFFERED=1

if [[ -z "$BAG" ]]; then
  BAG="$OUT/highway20"
  [[ -e "$BAG" ]] || "$PY" -m blockplan.cli -q simulate --scenario highway --duration 20 \
    --seed 1 --out "$BAG" >/dev/null
fi

SIM=false; [[ "$MODE" == --clock ]] && SIM=true
setsid ros2 launch blockplan planner.launch.py use_sim_time:=$SIM >"$OUT/launch.log" 2>&1 &
LAUNCH=$!
trap 'kill -INT -- -$LAUNCH 2>/dev/null || true; sleep 2; kill -KILL -- -$LAUNCH 2>/dev/null || true' EXIT
for _ in $(seq 180); do grep -q "active:" "$OUT/launch.log" && break; sleep 0.5; done
grep -q "active:" "$OUT/launch.log" || { cat "$OUT/launch.log"; exit 1; }

WAIT=(/camera/front_left/image_raw /camera/front/image_raw /camera/front_right/image_raw
      /camera/rear/image_raw /odom)
[[ "$MODE" == --clock ]] && WAIT+=(/clock)
rm -rf "$OUT/observed"
"$PY" -m blockplan.cli play "$BAG" "$MODE" --observe "$OUT/observed" --wait-for "${WAIT[@]}" \
  2>"$OUT/play.log"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores" >&2
