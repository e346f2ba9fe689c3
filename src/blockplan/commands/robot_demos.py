"""`blockplan robot-demos`: Meta-World scripted-expert demonstrations as ROS 2 bags, then the
robot data set built from them (docs/SIM.md "Robots")."""

from __future__ import annotations

import argparse
import json

from blockplan.errors import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder: bags/ and dataset/")
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=["reach", "push", "pick-place"],
        help="Meta-World tasks (reach push pick-place; any of the MT10 ten, `blockplan "
        "closed-loop --help`)",
    )
    parser.add_argument("--train", type=int, default=40, help="training episodes per task (40)")
    parser.add_argument("--val", type=int, default=4, help="validation episodes per task (4)")
    parser.add_argument("--test", type=int, default=4, help="test episodes per task (4)")
    parser.add_argument(
        "--render-every",
        type=int,
        default=4,
        help="render the cameras every k-th control step (4: 20 Hz)",
    )
    parser.add_argument("--image-size", type=int, default=64, help="square image side (64)")
    parser.add_argument("--max-steps", type=int, default=200, help="steps per episode at most")
    parser.add_argument("--worker", type=int, default=0, help="this process's index (0)")
    parser.add_argument("--num-workers", type=int, default=1, help="processes sharing the run")
    parser.add_argument(
        "--action-noise",
        type=float,
        default=0.0,
        help="training episodes execute the expert's action plus Gaussian noise of this std on "
        "the end-effector deltas and record the clean action (DART noise injection: recovery "
        "states; 0: off)",
    )
    parser.add_argument("--no-record", action="store_true", help="only build the data set")
    parser.add_argument("--no-dataset", action="store_true", help="only record the bags")


def run(args: argparse.Namespace) -> int:
    from blockplan.sim.robot_demos import build_dataset, record_demos

    if not 0 <= args.worker < args.num_workers:
        raise UserError(f"--worker {args.worker}: must be in [0, --num-workers)")
    if args.render_every < 1 or args.image_size < 8 or args.action_noise < 0:
        raise UserError("--render-every must be >= 1, --image-size >= 8, --action-noise >= 0")
    out: dict = {}
    if not args.no_record:
        counts = {"train": args.train, "val": args.val, "test": args.test}
        out["record"] = record_demos(
            args.out,
            args.tasks,
            counts,
            args.render_every,
            args.image_size,
            max_steps=args.max_steps,
            worker=args.worker,
            num_workers=args.num_workers,
            action_noise=args.action_noise,
        )
    if not args.no_dataset:
        out["dataset"] = str(build_dataset(args.out))
    print(json.dumps(out))
    return 0
