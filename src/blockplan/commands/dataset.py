"""`blockplan dataset`: simulate episodes with the expert, render and label them, and write
a sharded train/val/test data set (split by episode seed) plus a Fast-dDrive JSON export."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.sim.scenarios import SCENARIOS

    parser.add_argument(
        "--scenario",
        nargs="+",
        default=["highway"],
        choices=sorted(SCENARIOS),
        help="one or more highway-env scenarios",
    )
    parser.add_argument(
        "--episodes", type=int, required=True, help="kept (not crashed) episodes per scenario"
    )
    parser.add_argument("--out", required=True, help="data set folder (resumes if it exists)")
    parser.add_argument(
        "--duration",
        type=float,
        default=20.0,
        help="simulated seconds per episode incl. the 5 s look-ahead (20)",
    )
    parser.add_argument("--seed-base", type=int, default=0, help="first episode seed (0)")
    parser.add_argument(
        "--sample-period",
        type=float,
        default=0.5,
        help="seconds between samples of an episode (0.5)",
    )
    parser.add_argument(
        "--start",
        type=float,
        default=None,
        help="first sample time in s (default: once a full frame window and ego history lie "
        "behind it; 0: from the moment the recording, and a closed-loop hand-over, begins)",
    )
    parser.add_argument(
        "--perturb-every",
        type=float,
        default=None,
        metavar="S",
        help="recovery samples: about every S s add 0.4-0.8 s of steering to the expert's, keep "
        "only samples whose future the expert drove itself (default: no perturbations)",
    )
    parser.add_argument(
        "--policy-model",
        metavar="MODEL",
        help="on-policy (DAgger) samples: MODEL drives each episode in closed loop and every "
        "--branch-every s the expert, in a copy of the world, labels the state it reached "
        "(closedloop/dagger.py; needs --no-export)",
    )
    parser.add_argument(
        "--branch-every",
        type=float,
        default=None,
        metavar="S",
        help="seconds between the on-policy samples of an episode (1.0 with --policy-model)",
    )
    parser.add_argument("--num-frames", type=int, default=2, help="frames per camera (2)")
    parser.add_argument(
        "--frame-period", type=float, default=0.5, help="seconds between a sample's frames (0.5)"
    )
    parser.add_argument("--val-fraction", type=float, default=0.1, help="share of seeds (0.1)")
    parser.add_argument("--test-fraction", type=float, default=0.1, help="share of seeds (0.1)")
    parser.add_argument("--no-export", action="store_true", help="skip the Fast-dDrive JSON export")
    parser.add_argument("--rig", help="camera rig YAML (default: the shipped params/rig.yaml)")
    parser.add_argument(
        "--workers", type=int, default=1, help="episodes simulated in parallel processes (1)"
    )


def run(args: argparse.Namespace) -> int:
    from blockplan.planner.loading import ModelLoadError
    from blockplan.sim.dataset import DatasetError, DatasetOptions
    from blockplan.sim.dataset_writer import DatasetWriter
    from blockplan.sim.rig import RigError, load_rig
    from blockplan.sim.scenarios import ScenarioError, get_scenario

    try:
        rig = load_rig(args.rig)
        for name in args.scenario:
            if args.duration > get_scenario(name).max_duration_s:
                raise ScenarioError(
                    f"--duration={args.duration}: scenario {name!r} supports at most "
                    f"{get_scenario(name).max_duration_s} s"
                )
        options = DatasetOptions(
            scenarios=tuple(args.scenario),
            episodes=args.episodes,
            duration_s=args.duration,
            seed_base=args.seed_base,
            sample_period_s=args.sample_period,
            num_frames=args.num_frames,
            frame_period_s=args.frame_period,
            val_fraction=args.val_fraction,
            test_fraction=args.test_fraction,
            start_s=args.start,
            perturb_every_s=args.perturb_every,
            policy_model=args.policy_model,
            branch_every_s=(args.branch_every or 1.0) if args.policy_model else args.branch_every,
        )
        if options.policy_model is not None and not args.no_export:
            raise DatasetError("--policy-model writes no Fast-dDrive export: add --no-export")
        if options.policy_model is not None:  # a bad folder fails here, not in a worker
            from blockplan.closedloop.dagger import policy

            policy(options.policy_model)
        writer = DatasetWriter(
            args.out, options, rig, export_fastddrive=not args.no_export, workers=args.workers
        )
        manifest = writer.run(progress=True)
    except (DatasetError, RigError, ScenarioError, ModelLoadError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps({"out": args.out, **manifest["counts"]}, indent=2))
    return 0
