"""`blockplan dataset`: simulate episodes with the expert, render and label them, and write
a sharded train/val/test data set (split by episode seed) plus a Fast-dDrive JSON export;
or, with `--from-bags`, the same kind of data set from recorded ROS 2 bags
(replay/dataset.py)."""

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
        "--episodes",
        type=int,
        help="kept (not crashed) episodes per scenario (required without --from-bags)",
    )
    parser.add_argument(
        "--from-bags",
        nargs="+",
        metavar="BAG",
        help="build the data set from these recorded ROS 2 bags (mcap or sqlite3) instead of "
        "the simulator: camera window and ego history as the runtime builds them, the future "
        "and the meta behaviour from the bag's odometry; docs/DATA.md",
    )
    parser.add_argument(
        "--image-size",
        metavar="HxW",
        help="with --from-bags: store the frames at this size (e.g. 96x160; default: as "
        "recorded, which for a vehicle's cameras makes large shards)",
    )
    parser.add_argument(
        "--params",
        help="with --from-bags: the planner params YAML naming the bags' topics, cameras and "
        "frame window (default: the shipped planner.yaml)",
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
    parser.add_argument(
        "--val-fraction",
        type=float,
        default=None,
        help="share of seeds (0.1); with --from-bags, of the bags (0: all train)",
    )
    parser.add_argument(
        "--test-fraction",
        type=float,
        default=None,
        help="share of seeds (0.1); with --from-bags, of the bags (0: all train)",
    )
    parser.add_argument("--no-export", action="store_true", help="skip the Fast-dDrive JSON export")
    parser.add_argument("--rig", help="camera rig YAML (default: the shipped params/rig.yaml)")
    parser.add_argument(
        "--workers", type=int, default=1, help="episodes simulated in parallel processes (1)"
    )


def run_from_bags(args: argparse.Namespace) -> int:
    from blockplan.replay.dataset import BagDatasetParams, build_bag_dataset
    from blockplan.sim.dataset import MANIFEST

    sim_only = {
        "--episodes": args.episodes is not None,
        "--policy-model": args.policy_model is not None,
        "--perturb-every": args.perturb_every is not None,
        "--rig": args.rig is not None,
        "--workers": args.workers != 1,
    }
    given = [name for name, set_ in sim_only.items() if set_]
    if given:
        print(
            f"error: --from-bags takes no {', '.join(given)} (simulator options)", file=sys.stderr
        )
        return 2
    size = None
    if args.image_size is not None:
        try:
            height, width = (int(v) for v in args.image_size.lower().split("x"))
        except ValueError:
            print(
                f"error: --image-size={args.image_size!r}: expected HxW, e.g. 96x160",
                file=sys.stderr,
            )
            return 2
        size = (height, width)
    options = BagDatasetParams(
        image_size=size,
        sample_period_s=args.sample_period,
        start_s=args.start,
        val_fraction=args.val_fraction or 0.0,
        test_fraction=args.test_fraction or 0.0,
    )
    progress = sys.stderr.isatty()
    root = build_bag_dataset(args.from_bags, args.out, args.params, options, progress)
    manifest = json.loads((root / MANIFEST).read_text())
    print(json.dumps({"out": args.out, **manifest["counts"]}, indent=2))
    return 0


def run(args: argparse.Namespace) -> int:
    if args.from_bags:
        return run_from_bags(args)
    from blockplan.planner.loading import ModelLoadError
    from blockplan.sim.dataset import DatasetError, DatasetOptions
    from blockplan.sim.dataset_writer import DatasetWriter
    from blockplan.sim.rig import RigError, load_rig
    from blockplan.sim.scenarios import ScenarioError, get_scenario

    if args.episodes is None:
        print(
            "error: --episodes is required (or build from recorded bags: --from-bags)",
            file=sys.stderr,
        )
        return 2
    for name, value in (("--params", args.params), ("--image-size", args.image_size)):
        if value is not None:
            print(
                f"error: {name} goes with --from-bags (the simulator takes --rig)", file=sys.stderr
            )
            return 2
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
            val_fraction=0.1 if args.val_fraction is None else args.val_fraction,
            test_fraction=0.1 if args.test_fraction is None else args.test_fraction,
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
