"""Replay bags with the ego-status MLPs as the planner (the open-loop bar, through the same
control loop as `blockplan replay`): ADE against the recorded path, per bag.

    python scripts/ego_mlp_replay.py --data BASE --out OUT BAG [BAG ...] [--lane-pose] [--lead]
        [--model models/blockplan-tiny] [--timing ideal]

The MLP is fitted on the data set's train split with `--model`'s history rows, as
`blockplan eval` and `blockplan closed-loop --policies ego_mlp` fit it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from blockplan.config import default_params_path, load_config
from blockplan.replay import run_replay
from blockplan.train.baselines import EgoMLPPlanner
from blockplan.train.evaluate import recipe_of_folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bags", nargs="+")
    parser.add_argument("--data", required=True, help="a `blockplan dataset` folder")
    parser.add_argument("--out", required=True, help="one output folder per bag goes here")
    parser.add_argument("--model", default="models/blockplan-tiny", help="whose history rows")
    parser.add_argument("--lane-pose", action="store_true", help="the lane-pose MLP")
    parser.add_argument(
        "--lead", action="store_true", help="also the car ahead (ego_mlp_lead with --lane-pose)"
    )
    parser.add_argument("--timing", default="ideal", choices=["ideal", "measured"])
    args = parser.parse_args()
    config = load_config(default_params_path())
    recipe = recipe_of_folder(args.model)
    planner = EgoMLPPlanner.fit(args.data, recipe, lane_pose=args.lane_pose, lead=args.lead)
    for bag in args.bags:
        out = Path(args.out) / Path(bag).stem
        metrics = run_replay(bag, out, planner, config, timing=args.timing).metrics
        print(
            f"{bag}: ADE@3s {metrics['ade_3s']:.2f} m  ADE@5s {metrics['ade_5s']:.2f} m  "
            f"fallback ticks {metrics['fallbacks']}  ({out})"
        )


if __name__ == "__main__":
    main()
