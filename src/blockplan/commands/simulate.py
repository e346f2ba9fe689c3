"""`blockplan simulate`: one highway-env episode driven by the IDM/MOBIL expert, rendered
through the camera rig and written as a ROS 2 bag with odometry, TF and ground truth."""

from __future__ import annotations

import argparse
import json
import sys

from blockplan.bags import BagError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.sim.scenarios import SCENARIOS

    parser.add_argument(
        "--scenario", default="highway", choices=sorted(SCENARIOS), help="highway-env scenario"
    )
    parser.add_argument(
        "--duration", type=float, default=10.0, help="seconds of bag to write (default 10)"
    )
    parser.add_argument("--seed", type=int, default=0, help="episode seed (default 0)")
    parser.add_argument("--out", required=True, help="bag directory (or a .mcap/.db3 file)")
    parser.add_argument(
        "--storage", default="mcap", choices=("mcap", "sqlite3"), help="bag storage (mcap)"
    )
    parser.add_argument(
        "--compressed",
        action="store_true",
        help="write sensor_msgs/CompressedImage (jpeg) instead of raw rgb8 images",
    )
    parser.add_argument("--rig", help="camera rig YAML (default: the shipped params/rig.yaml)")


def run(args: argparse.Namespace) -> int:
    from blockplan.sim.bag import SimBagError, write_episode_bag
    from blockplan.sim.episode import run_episode
    from blockplan.sim.labels import HORIZON_S, explanation_budget_fits
    from blockplan.sim.rig import RigError, load_rig
    from blockplan.sim.scenarios import ScenarioError, get_scenario

    try:
        rig = load_rig(args.rig)
        scenario = get_scenario(args.scenario)
        if not args.duration > 0:
            raise ScenarioError(f"--duration={args.duration}: must be > 0")
        log = run_episode(scenario, args.seed, args.duration + HORIZON_S)
    except (RigError, ScenarioError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if log.crashed_at is not None:
        print(
            f"error: the expert crashed at t={log.crashed_at:.2f} s in {args.scenario} seed "
            f"{args.seed} (crashed episodes are not written); try another --seed",
            file=sys.stderr,
        )
        return 3
    try:
        summary = write_episode_bag(
            log,
            rig,
            args.out,
            args.duration,
            storage=args.storage,
            compressed=args.compressed,
            fits=explanation_budget_fits(),
            progress=sys.stderr.isatty(),
        )
    except (BagError, SimBagError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    report = {
        "bag": summary.path,
        "storage": summary.storage,
        "scenario": args.scenario,
        "seed": args.seed,
        "duration_s": summary.duration_s,
        "cameras": list(rig.names),
        "compressed": bool(args.compressed),
        "message_counts": summary.message_counts,
    }
    print(json.dumps(report, indent=2))
    return 0
