"""`blockplan robot-scenes`: scene frames of many Meta-World layouts, labelled with the
object's, the goal's and the hand's positions, to pretrain a scene-token vision tower
(docs/SIM.md "Scene frames")."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder of the scene frames")
    parser.add_argument(
        "--tasks",
        nargs="+",
        default=["reach", "push", "pick-place"],
        help="Meta-World tasks (reach push pick-place; any of the MT10 ten, `blockplan "
        "closed-loop --help`)",
    )
    parser.add_argument("--seeds", type=int, default=4000, help="layouts per task (4000)")
    parser.add_argument(
        "--frames-per-seed",
        type=int,
        default=3,
        help="frames per layout: the reset frame and after noisy expert stretches (3)",
    )
    parser.add_argument(
        "--max-gap", type=int, default=40, help="expert steps between two frames at most (40)"
    )
    parser.add_argument(
        "--action-noise",
        type=float,
        default=0.5,
        help="std of the noise on the expert's end-effector deltas (0.5)",
    )
    parser.add_argument("--image-size", type=int, default=64, help="square image side (64)")
    parser.add_argument("--block", type=int, default=250, help="seeds per shard (250)")
    parser.add_argument("--worker", type=int, default=0, help="this process's index (0)")
    parser.add_argument("--num-workers", type=int, default=1, help="processes sharing the run")


def run(args: argparse.Namespace) -> int:
    from blockplan.sim.scene_frames import record_scene_frames

    out = record_scene_frames(
        args.out,
        args.tasks,
        args.seeds,
        frames_per_seed=args.frames_per_seed,
        image_size=args.image_size,
        max_gap=args.max_gap,
        action_noise=args.action_noise,
        block=args.block,
        worker=args.worker,
        num_workers=args.num_workers,
    )
    print(json.dumps(out))
    return 0
