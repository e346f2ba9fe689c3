"""The expert's own futures through the validity gates, per scenario (docs/BENCHMARKS.md
"Validity gates"): what share of a data set's samples a perfect imitator would get published.

    python scripts/gate_pass_rates.py DATA_DIR [--split test] [--json out.json]

Rows per scenario:
* before: the WOD-E2E JMT interpolation of the ground-truth waypoints (the path the runtime
  published until the gates were split) against the old single set of gates, which are
  today's comfort limits (`ComfortConfig()`);
* after: the published path (the jerk-minimizing fit, `trajectory.waypoint_tolerance_m`)
  against the hard `gates` (reject → fallback), and against the `comfort` limits (reported
  only).
Also the 99th percentile and maximum of every checked quantity on the published path, the
numbers the hard limits were set from. Samples whose future has the expert backing up (a data
set written before `blockplan dataset` left them out) are counted apart and left out of the
rates.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from blockplan.config import ComfortConfig, GateConfig, TrajectoryOutputConfig
from blockplan.sim.dataset import REVERSING_SPEED_MPS, load_shard
from blockplan.trajectory import check_gates, smooth_upsample, upsample

QUANTITIES = ("min_accel", "max_accel", "max_lateral_accel", "max_abs_jerk", "max_yaw_rate")


def peaks(traj) -> dict[str, float]:
    speed, accel = np.asarray(traj.speed), np.asarray(traj.accel)
    curvature = np.asarray(traj.curvature)
    return {
        "min_accel": float(accel.min()),
        "max_accel": float(accel.max()),
        "max_lateral_accel": float(np.abs(speed**2 * curvature).max()),
        "max_abs_jerk": float(np.abs(np.diff(accel) / np.diff(traj.t)).max()),
        "max_yaw_rate": float(np.abs(speed * curvature).max()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", help="a `blockplan dataset` folder")
    parser.add_argument("--split", default="test")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args()
    root = Path(args.data)
    manifest = json.loads((root / "manifest.json").read_text())
    gates, comfort = GateConfig(), ComfortConfig()
    tolerance = TrajectoryOutputConfig().waypoint_tolerance_m
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    reversing: dict[str, int] = defaultdict(int)
    before_all: dict[str, int] = defaultdict(int)  # passes among the left-out samples
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for entry in manifest["episodes"]:
        if entry["split"] != args.split or not (root / entry["shard"]).is_file():
            continue
        shard = load_shard(root / entry["shard"])
        backs_up = shard["future_speed"].min(axis=1) < REVERSING_SPEED_MPS  # (N,)
        reversing[entry["scenario"]] += int(backs_up.sum())
        for waypoints in shard["waypoints"][backs_up].astype(np.float64):
            before_all[entry["scenario"]] += check_gates(upsample(waypoints), comfort).ok
        for waypoints in shard["waypoints"][~backs_up].astype(np.float64):
            before = upsample(waypoints)
            after = smooth_upsample(waypoints, tolerance)
            row = counts[entry["scenario"]]
            row[0] += 1
            row[1] += check_gates(before, comfort).ok
            row[2] += check_gates(after, gates).ok
            row[3] += check_gates(after, comfort).ok
            for k, v in peaks(after).items():
                values[entry["scenario"]][k].append(v)
    doc = {"data": str(root), "split": args.split, "waypoint_tolerance_m": tolerance}
    print(f"{args.split} split of {root}; published path: fit within {tolerance} m")
    print(
        "| scenario | samples | before: WOD JMT vs old gates (all samples) | after: hard gates "
        "| after: comfort | left out (expert backs up) |"
    )
    print("|---|---|---|---|---|---|")
    for scenario, (n, old, hard, comf) in sorted(counts.items()):
        left_out = reversing[scenario]
        old_all = (old + before_all[scenario]) / (n + left_out)
        print(
            f"| {scenario} | {n} | {old / n:.1%} ({old_all:.1%} of {n + left_out}) "
            f"| {hard / n:.1%} | {comf / n:.1%} | {left_out} |"
        )
        doc[scenario] = {
            "samples": n,
            "left_out_reversing": left_out,
            "before_old_gates_all_samples": old_all,
            "before_old_gates": old / n,
            "after_hard_gates": hard / n,
            "after_comfort": comf / n,
            "p99": {
                k: float(np.percentile(v, 1 if k == "min_accel" else 99))
                for k, v in values[scenario].items()
            },
            "extreme": {
                k: float(min(v) if k == "min_accel" else max(v))
                for k, v in values[scenario].items()
            },
        }
    print("\npublished path, p99 (p1 for min_accel) / extreme per scenario:")
    for scenario in sorted(counts):
        cells = [
            f"{k} {doc[scenario]['p99'][k]:.2f} / {doc[scenario]['extreme'][k]:.2f}"
            for k in QUANTITIES
        ]
        print(f"  {scenario}: " + ", ".join(cells))
    print(f"hard gates: {GateConfig()}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
