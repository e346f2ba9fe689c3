"""`blockplan train`: train a planner with the SASD recipe on simulator shards or Fast-dDrive
JSON records, in one process or under `torchrun --nproc_per_node N -m blockplan.cli train`;
with `--embodiment robot`, a robot policy on a robot data set (a bidirectional teacher, then
a block-causal student by diffusion forcing and asymmetric distillation; one process)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from blockplan.commands.train_settings import settings_behind_set

log = logging.getLogger(__name__)

# The options `blockplan train --help` lists: what a user sets for a run. Everything else
# (the architecture's inputs, loss weights, data mixture shares, the robot recipe's phases)
# is a setting: `--set NAME=VALUE`, listed by `--settings`, written under `set:` in a recipe.
USER_OPTIONS = (
    "data", "fastddrive", "val_fastddrive", "extra_data", "out", "embodiment", "arch",
    "init_from", "steps", "batch_size", "lr", "warmup", "seed", "save_every", "val_samples",
    "max_minutes", "stop_after", "resume", "num_threads", "device", "teacher_steps", "help",
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.model.presets import robot_preset_names
    from blockplan.train.recipe import ARCHS

    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--data",
        help="a `blockplan dataset` folder (train/val splits), or a "
        "robot data set with --embodiment robot",
    )
    src.add_argument("--fastddrive", help="a Fast-dDrive JSON file of training records")
    parser.add_argument(
        "--extra-data",
        action="append",
        default=[],
        metavar="DIR",
        help="another `blockplan dataset` folder whose train/val splits join --data's "
        "(repeatable; same frame spacing), e.g. one sampled from the start of each recording",
    )
    parser.add_argument("--val-fastddrive", help="Fast-dDrive JSON validation records")
    parser.add_argument("--out", required=True, help="run folder: metrics, checkpoint, best")
    parser.add_argument(
        "--embodiment",
        default="vehicle",
        choices=["vehicle", "robot"],
        help="vehicle: the driving schema (SASD); robot: action chunks",
    )
    parser.add_argument(
        "--arch",
        choices=sorted(ARCHS) + robot_preset_names(),
        help="model size (reference; robot: robot-tiny)",
    )
    parser.add_argument(
        "--trajectory-head",
        default="tokens",
        choices=["tokens", "flow"],
        help="tokens: the answer's digit tokens; flow: a flow-matching head "
        "over the decoder's prefix, trained jointly (docs/ALGORITHMS.md §7.1)",
    )
    parser.add_argument(
        "--ego-tokens",
        type=int,
        default=0,
        help="carry the ego history as this many embeddings of a numeric ego encoder "
        "instead of digit text (0: digits; model/ego.py)",
    )
    parser.add_argument(
        "--ego-lane-pose",
        action="store_true",
        help="with --ego-tokens: the ego encoder also reads the ego's pose in its lane at t0 "
        "(offset, heading error; the node's /localization/lane_pose), unknown for "
        "--lane-pose-dropout of the samples (needs data sets that record the lane pose)",
    )
    parser.add_argument(
        "--ego-reads-scene",
        action="store_true",
        help="with --ego-tokens and --vision-scene-token: the ego encoder also reads the front "
        "camera's newest scene token (the gap to the car ahead), so the decoder gets it through "
        "the ego slots it always reads (docs/ALGORITHMS.md §3.5)",
    )
    parser.add_argument(
        "--ego-lead",
        action="store_true",
        help="with --ego-tokens: the ego encoder also reads the car ahead in the lane (gap and "
        "speed; the node's /perception/lead_vehicle), unknown for --lead-dropout of the "
        "samples (needs data sets that record `lead`; docs/ALGORITHMS.md §3.6)",
    )
    parser.add_argument(
        "--ego-beside",
        action="store_true",
        help="with --ego-tokens: the ego encoder also reads the lanes beside the ego's (the "
        "lane count on each side and the nearest cars ahead and behind in them; the node's "
        "/perception/lanes_beside), unknown for --beside-dropout of the samples (needs data "
        "sets that record `lanes_beside` and `beside`; docs/ALGORITHMS.md §3.7)",
    )
    parser.add_argument(
        "--ego-route",
        action="store_true",
        help="with --ego-tokens: the ego encoder also reads the route ahead (where the planned "
        "route is 5-60 m along it; the node's /planning/route), unknown for --route-dropout "
        "of the samples (needs data sets that record `route_ahead`; docs/ALGORITHMS.md §3.8)",
    )
    parser.add_argument(
        "--route-dropout",
        type=float,
        default=0.1,
        help="share of training samples whose route ahead the encoder sees as unknown, so the "
        "model also plans without a router (0.1)",
    )
    parser.add_argument(
        "--perception-dropout",
        type=float,
        default=0.0,
        help="share of training samples whose lane pose, car ahead and lanes beside the "
        "encoder sees as unknown all at once, as on a vehicle without those modules, so the "
        "model learns to plan from the cameras (0)",
    )
    parser.add_argument(
        "--beside-dropout",
        type=float,
        default=0.1,
        help="share of training samples whose lane count beside, and apart from it whose cars "
        "beside, the encoder sees as unknown, so the model also plans without a map or a "
        "tracker (0.1)",
    )
    parser.add_argument(
        "--lead-dropout",
        type=float,
        default=0.1,
        help="share of training samples whose car ahead the encoder sees as unknown, so the "
        "model also plans without a tracker (0.1)",
    )
    parser.add_argument(
        "--lane-pose-dropout",
        type=float,
        default=0.25,
        help="share of training samples whose lane pose the encoder sees as unknown, so the "
        "model also plans without localisation (0.25)",
    )
    parser.add_argument(
        "--vision-grid",
        metavar="RxC",
        help="visual tokens per image as a rows x cols grid (reference: 2x3); with "
        "--init-from a folder of another grid, its cell embeddings are resampled",
    )
    parser.add_argument(
        "--image-size",
        metavar="HxW",
        help="the vision tower's input size in pixels (reference: 48x80; the simulator renders "
        "96x160); with --init-from a folder of another size its tower carries over (the "
        "convolutions do not depend on the size, the pooling adapts)",
    )
    parser.add_argument(
        "--history-rows",
        type=int,
        help="ego-history rows, 0.5 s apart, in the reference schema (3; an "
        "ego-encoder run may take more at no prompt cost)",
    )
    parser.add_argument(
        "--cameras",
        nargs="+",
        default=["front_left", "front", "front_right", "rear"],
        help="camera names, in the model's (view-major) order",
    )
    parser.add_argument("--num-frames", type=int, help="frames per camera (2; robot: 1)")
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank (8)")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (2e-3)")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up steps (50)")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decay (0.01)")
    parser.add_argument("--grad-clip", type=float, default=1.0, help="max grad norm (1.0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of init, order, noise (0)")
    parser.add_argument("--log-every", type=int, default=5, help="steps per log line (5)")
    parser.add_argument("--save-every", type=int, default=50, help="steps per checkpoint (50)")
    parser.add_argument(
        "--val-samples", type=int, default=48, help="validation samples per checkpoint (48)"
    )
    parser.add_argument("--max-minutes", type=float, help="stop and save after this much wall time")
    parser.add_argument(
        "--stop-after",
        type=int,
        help="stop and save at this step (the schedule stays that of --steps; --resume continues)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue from OUT/checkpoint when it exists"
    )
    parser.add_argument("--init-from", help="start from this model folder's weights (fine-tuning)")
    parser.add_argument(
        "--lateral-share",
        type=float,
        default=0.0,
        help="per scenario, repeat samples whose future deviates laterally "
        "by more than --lateral-threshold until they are at least this "
        "share of the epoch (0: the data as it is)",
    )
    parser.add_argument(
        "--lateral-threshold",
        type=float,
        default=1.0,
        help="lateral deviation (m) that makes a sample lateral (1.0)",
    )
    parser.add_argument(
        "--lane-pose-weight",
        type=float,
        default=0.0,
        help="vehicles: weight of a training-only probe that reads the ego's pose in its lane "
        "(offset, heading error) from the newest visual tokens, so they carry it "
        "(needs data sets that record the lane pose; 0: off)",
    )
    parser.add_argument(
        "--lead-weight",
        type=float,
        default=0.0,
        help="vehicles: weight of a training-only probe that reads the gap to the car ahead in "
        "the ego's lane from the newest visual tokens, so they carry it (needs data sets that "
        "record it, `lead`; samples without it are skipped; 0: off)",
    )
    parser.add_argument(
        "--scene-teacher-share",
        type=float,
        default=0.0,
        help="vehicles with --vision-scene-token: share of training samples whose scene token "
        "says the true gap instead of its head's, so the decoder learns to read the token "
        "(teacher forcing; validation never forces; 0: off)",
    )
    parser.add_argument(
        "--steady-history-share",
        type=float,
        default=0.0,
        help="vehicles with --ego-tokens: share of training samples whose ego history shows "
        "the t0 speed held (no acceleration), so the model learns when to brake from what it "
        "sees rather than from its own past braking (validation keeps the true history; 0: off)",
    )
    parser.add_argument("--num-threads", type=int, default=2, help="torch CPU threads (2)")
    parser.add_argument(
        "--device",
        default="auto",
        choices=["auto", "cpu", "cuda"],
        help="where to train (auto: cuda when available)",
    )
    robot = parser.add_argument_group("robot (--embodiment robot)")
    robot.add_argument(
        "--teacher-steps",
        type=int,
        help="steps of the bidirectional teacher (default: --steps); --steps are the student's",
    )
    robot.add_argument("--horizon", type=int, default=8, help="timesteps per chunk (8)")
    robot.add_argument("--bins", type=int, default=256, help="bins per action value (256)")
    robot.add_argument(
        "--block-size",
        type=int,
        help="values per block, a multiple of the action dimension (default: it)",
    )
    robot.add_argument(
        "--instruction-budget", type=int, default=16, help="instruction tokens in the prompt (16)"
    )
    robot.add_argument(
        "--range-quantile",
        type=float,
        default=0.01,
        help="bin ranges: these quantiles of the training data (0.01)",
    )
    robot.add_argument(
        "--vision-keypoints",
        type=int,
        default=0,
        help="spatial-softmax keypoints per image, one more visual token (0: none; "
        "docs/ALGORITHMS.md §8.1; vehicles too, §3.5)",
    )
    robot.add_argument(
        "--vision-scene-token",
        action="store_true",
        help="a scene head per image that regresses the object's, the goal's and the hand's "
        "positions (trained with --scene-weight) and feeds them to the decoder as one more "
        "visual token (docs/ALGORITHMS.md §8.3); vehicles: the gap to the car ahead in the "
        "lane, from the front camera (trained with --lead-weight, §3.5)",
    )
    robot.add_argument(
        "--vision-scene-reads",
        choices=["cells", "map"],
        default="cells",
        help="what the scene head reads besides the keypoints: the pooled grid (cells) or the "
        "last stage's full feature map (map: where in the image a feature is; vehicles, "
        "docs/ALGORITHMS.md §3.5)",
    )
    robot.add_argument(
        "--scene-weight",
        type=float,
        default=0.0,
        help="weight of the scene loss: the object's, the goal's and the hand's positions, "
        "regressed by the scene token's head (--vision-scene-token, docs/ALGORITHMS.md §8.3) "
        "or else by a training-only probe on the newest visual tokens (§8.2); needs bags "
        "with the /sim/*/position topics; 0: off",
    )
    robot.add_argument(
        "--full-mask-share",
        type=float,
        default=0.0,
        help="share of training samples whose chunk is masked whole, as every decode starts "
        "(docs/ALGORITHMS.md §8.4; 0: the plain and diffusion-forcing draws only)",
    )
    robot.add_argument(
        "--tower-data",
        help="scene frames (blockplan robot-scenes) to pretrain the scene token's tower on "
        "before the teacher (with --tower-steps; docs/ALGORITHMS.md §8.4)",
    )
    robot.add_argument(
        "--tower-steps", type=int, default=0, help="tower pretraining steps (0: none)"
    )
    robot.add_argument(
        "--tower-batch", type=int, default=32, help="scene frames per tower step (32)"
    )
    robot.add_argument(
        "--tower-minutes",
        type=float,
        help="wall-clock budget of the tower phase (apart from --max-minutes)",
    )
    robot.add_argument(
        "--tower-unfrozen",
        action="store_true",
        help="keep training the pretrained tower's convolutions, keypoints and scene head "
        "with the policy (default: they stay fixed)",
    )
    robot.add_argument(
        "--eval-samples",
        type=int,
        default=8,
        help="validation samples decoded at the end for the model card (8)",
    )
    settings_behind_set(parser, USER_OPTIONS)


def run(args: argparse.Namespace) -> int:
    import torch

    from blockplan.train.distributed import close_distributed, init_distributed
    from blockplan.train.examples import (
        DataError,
        concat_examples,
        load_examples,
        load_fastddrive,
    )
    from blockplan.train.probe import LEAD_TARGETS
    from blockplan.train.recipe import Recipe
    from blockplan.train.trainer import TrainConfig, Trainer, TrainError

    torch.set_num_threads(args.num_threads)
    if args.embodiment == "robot":
        if args.extra_data:
            print("error: --extra-data joins vehicle data sets only", file=sys.stderr)
            return 2
        from blockplan.commands.train_robot import run_robot

        return run_robot(args)
    if args.arch is not None and args.arch.startswith("robot-"):
        print(f"error: --arch {args.arch} needs --embodiment robot", file=sys.stderr)
        return 2
    ctx = init_distributed(args.device)
    try:
        arch, num_frames = args.arch or "reference", args.num_frames or 2
        # A simulator data set records its frame spacing; the model's config.json keeps it.
        period = None
        if args.data:
            from blockplan.train.examples import read_manifest

            period = read_manifest(args.data).get("options", {}).get("frame_period_s")
            for extra in args.extra_data:
                other = read_manifest(extra).get("options", {}).get("frame_period_s")
                if other != period:
                    raise DataError(
                        f"--extra-data {extra}: frames {other} s apart, --data's {period} s"
                    )
        elif args.extra_data:
            raise DataError("--extra-data joins a --data folder")
        schema = None
        if args.history_rows is not None:
            from blockplan.train.recipe import reference_schema

            if args.history_rows < 1:
                raise ValueError(f"--history-rows {args.history_rows}: must be >= 1")
            schema = dataclasses.replace(reference_schema(), num_history=args.history_rows)
        vision_grid = None
        if args.vision_grid:
            from blockplan.model.vision import parse_grid

            vision_grid = parse_grid(args.vision_grid)
        image_size = None
        if args.image_size:
            from blockplan.model.vision import parse_size

            image_size = parse_size(args.image_size)
        recipe = Recipe.build(
            arch,
            tuple(args.cameras),
            num_frames,
            schema=schema,
            frame_period_s=period,
            trajectory_head=args.trajectory_head,
            ego_tokens=args.ego_tokens,
            vision_grid=vision_grid,
            image_size=image_size,
            ego_lane_pose=args.ego_lane_pose,
            ego_scene=args.ego_reads_scene,
            ego_lead=args.ego_lead,
            ego_beside=args.ego_beside,
            ego_route=args.ego_route,
            vision_keypoints=args.vision_keypoints,
            vision_scene=LEAD_TARGETS if args.vision_scene_token else 0,
            vision_scene_reads=args.vision_scene_reads,
        )
        show = ctx.is_main
        if args.data:
            folders = [args.data, *args.extra_data]
            train_set = concat_examples(
                [load_examples(f, "train", recipe, progress=show) for f in folders]
            )
            val_parts = []
            for folder in folders:
                try:
                    val_parts.append(load_examples(folder, "val", recipe, progress=show))
                except DataError as e:
                    log.warning("no validation split (%s)", e)
            val_set = concat_examples(val_parts) if val_parts else None
            if val_set is None:
                log.warning("no validation samples: best = latest")
        else:
            train_set = load_fastddrive(args.fastddrive, recipe)
            val_set = load_fastddrive(args.val_fastddrive, recipe) if args.val_fastddrive else None
        # The flow head normalises by the training targets (the encoding does not depend on it).
        recipe = recipe.with_flow_statistics(train_set.future_xy)
        config = TrainConfig(
            steps=args.steps,
            batch_size=args.batch_size,
            lr=args.lr,
            weight_decay=args.weight_decay,
            warmup_steps=args.warmup,
            grad_clip=args.grad_clip,
            seed=args.seed,
            log_every=args.log_every,
            save_every=args.save_every,
            val_samples=args.val_samples,
            max_minutes=args.max_minutes,
            lateral_share=args.lateral_share,
            lateral_threshold_m=args.lateral_threshold,
            lane_pose_weight=args.lane_pose_weight,
            lane_pose_dropout=args.lane_pose_dropout,
            lead_dropout=args.lead_dropout,
            beside_dropout=args.beside_dropout,
            route_dropout=args.route_dropout,
            perception_dropout=args.perception_dropout,
            lead_weight=args.lead_weight,
            scene_teacher_share=args.scene_teacher_share,
            steady_history_share=args.steady_history_share,
        )
        trainer = Trainer(recipe, train_set, args.out, config, ctx, val_set)
        if args.resume and trainer.resume():
            log.info("resumed from step %d", trainer.step)
        elif args.init_from:
            trainer.init_from(args.init_from)
        if ctx.is_main:
            log.info(
                "%d parameters, %d train samples, %d per epoch per rank",
                trainer.model.num_parameters(),
                len(train_set),
                trainer.steps_per_epoch * config.batch_size,
            )
        final = trainer.fit(until=args.stop_after)
    except (DataError, TrainError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        close_distributed(ctx)
    if ctx.is_main:
        print(json.dumps(final))
    return 0
