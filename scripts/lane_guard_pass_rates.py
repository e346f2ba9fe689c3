"""The expert's own futures through the lane guard, per scenario (docs/BENCHMARKS.md
"Validity gates"): what share of a data set's samples the guard would keep if the planner
planned exactly what the expert drove.

    python scripts/lane_guard_pass_rates.py DATA_DIR [--split train] [--json out.json]

Each sample's ground-truth waypoints go through the published path's fit
(`trajectory.waypoint_tolerance_m`) and `guard_keeps` with the sample's observation, as the
runtime builds it: its lanes beside, lane pose and ego history (`sample_observation`). Per
scenario: samples, samples whose path moves into a lane beside (over `change_m`), and those
the guard drops, for a car beside and for no lane there. Data sets written before the lanes
beside were recorded have no report, and the guard keeps everything.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from blockplan.config import LaneGuardConfig, TrajectoryOutputConfig
from blockplan.runtime.lane_guard import guard_keeps, moves_into
from blockplan.sim.dataset import load_shard, sample_observation
from blockplan.trajectory import smooth_upsample


def pass_rates(root: Path, split: str, guard: LaneGuardConfig) -> dict[str, dict]:
    output = TrajectoryOutputConfig()
    manifest = json.loads((root / "manifest.json").read_text())
    rows: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    for entry in manifest["episodes"]:
        if entry["split"] != split:
            continue
        shard = load_shard(root / entry["shard"])
        row = rows[entry["scenario"]]
        for i in range(len(shard["stamp_ns"])):
            observation = sample_observation(shard, i)
            path = smooth_upsample(
                shard["waypoints"][i].astype(np.float64),
                output.waypoint_tolerance_m,
                dt=output.dt,
                horizon_s=output.horizon_s,
            )
            row["samples"] += 1
            row["moves_beside"] += int(any(moves_into(path, observation, guard.change_m)))
            keep, why = guard_keeps([path], observation, guard)
            if not keep[0]:
                row["dropped_car" if "car" in why else "dropped_no_lane"] += 1
    out = {}
    for scenario, row in sorted(rows.items()):
        dropped = row["dropped_car"] + row["dropped_no_lane"]
        out[scenario] = dict(row) | {"kept_share": 1.0 - dropped / max(row["samples"], 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--split", default="train")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rates = pass_rates(args.data, args.split, LaneGuardConfig(enabled=True))
    for scenario, row in rates.items():
        print(f"{scenario:13s} {row}")
    if args.json:
        args.json.write_text(json.dumps(rates, indent=1))


if __name__ == "__main__":
    main()
