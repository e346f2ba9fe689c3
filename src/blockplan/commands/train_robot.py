"""`blockplan train --embodiment robot`: a robot policy on a robot data set (a bidirectional
teacher, then a block-causal student by diffusion forcing and asymmetric distillation)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger("blockplan.commands.train")


def run_robot(args: argparse.Namespace) -> int:
    """The robot recipe: teacher, then student; the student's folder is OUT/best."""
    import torch

    from blockplan.schema import SchemaError
    from blockplan.train.robot_data import RobotDataError
    from blockplan.train.robot_examples import RobotRecipe, load_robot_examples
    from blockplan.train.robot_trainer import RobotTrainConfig, RobotTrainer
    from blockplan.train.trainer import TrainError

    if not args.data:
        print("error: --embodiment robot trains on --data (a robot data set)", file=sys.stderr)
        return 2
    arch = args.arch or "robot-tiny"
    if not arch.startswith("robot-"):
        print(f"error: --arch {arch}: a robot run takes a robot-* size", file=sys.stderr)
        return 2
    if args.device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    else:
        device = args.device
    try:
        if args.init_from:  # fine-tuning: the folder's schema (bins, ranges) and size
            recipe = RobotRecipe.of_folder(args.init_from, args.data)
            _check_recipe_flags(args, recipe)
        else:
            recipe = RobotRecipe.build(
                arch,
                args.data,
                horizon=args.horizon,
                num_bins=args.bins,
                block_size=args.block_size,
                num_frames=args.num_frames or 1,
                instruction_budget=args.instruction_budget,
                quantile=args.range_quantile,
                keypoints=args.vision_keypoints,
                scene_token=args.vision_scene_token,
            )
        train_set = load_robot_examples(args.data, "train", recipe)
        try:
            val_set = load_robot_examples(args.data, "val", recipe)
        except RobotDataError as e:
            log.warning("no validation split (%s)", e)
            val_set = None
        config = RobotTrainConfig(
            teacher_steps=args.teacher_steps or args.steps,
            student_steps=args.steps,
            batch_size=args.batch_size,
            lr=args.lr,
            weight_decay=args.weight_decay,
            warmup_steps=args.warmup,
            grad_clip=args.grad_clip,
            seed=args.seed,
            log_every=args.log_every,
            val_samples=args.val_samples,
            eval_samples=args.eval_samples,
            teacher_max_s=None if args.max_minutes is None else args.max_minutes * 60 * 0.8,
            student_max_s=None if args.max_minutes is None else args.max_minutes * 60 * 0.2,
            scene_weight=args.scene_weight,
            full_mask_share=args.full_mask_share,
            tower_steps=args.tower_steps,
            tower_batch=args.tower_batch,
            tower_max_s=None if args.tower_minutes is None else args.tower_minutes * 60,
            tower_freeze=not args.tower_unfrozen,
        )
        tower_set = None
        if args.tower_data:
            from blockplan.sim.scene_frames import load_scene_frames

            mc = recipe.model_config
            tower_set = load_scene_frames(args.tower_data, mc.camera_names, mc.vision.image_height)
        command = _robot_command(args, arch, config, recipe)
        trainer = RobotTrainer(
            recipe,
            train_set,
            args.out,
            config,
            val_set,
            device,
            command=command,
            data=args.data,
            tower_set=tower_set,
            tower_data=args.tower_data or "",
        )
        torch.set_num_threads(args.num_threads)
        final = trainer.fit(resume=args.resume, init_from=args.init_from)
    except (RobotDataError, SchemaError, TrainError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(final))
    return 0


def _check_recipe_flags(args: argparse.Namespace, recipe) -> None:
    """A fine-tune keeps the folder's recipe: a recipe flag that asks for something else is
    an error, not silently ignored."""
    from blockplan.train.robot_data import RobotDataError

    mc, schema = recipe.model_config, recipe.schema
    asked = {
        "--horizon": (args.horizon, schema.horizon, 8),
        "--bins": (args.bins, schema.num_bins, 256),
        "--block-size": (args.block_size, mc.block_size, None),
        "--num-frames": (args.num_frames, mc.num_frames, None),
        "--instruction-budget": (args.instruction_budget, schema.instruction_budget, 16),
        "--vision-keypoints": (args.vision_keypoints, mc.vision.keypoints, 0),
        "--vision-scene-token": (args.vision_scene_token, bool(mc.vision.scene), False),
    }
    for flag, (value, theirs, default) in asked.items():
        if value != default and value != theirs:
            raise RobotDataError(
                f"{flag} {value}: --init-from {args.init_from} has {theirs} (a fine-tune "
                "keeps the folder's recipe)"
            )


def _robot_command(args: argparse.Namespace, arch: str, config, recipe) -> str:
    """The command line that reproduces a robot run (for its model card)."""
    import shlex

    mc, schema = recipe.model_config, recipe.schema
    parts = ["blockplan", "train", "--embodiment", "robot", "--data", args.data, "--out", args.out]
    if not args.init_from:
        parts += ["--arch", arch]
    parts += [
        "--steps",
        config.student_steps,
        "--teacher-steps",
        config.teacher_steps,
        "--batch-size",
        config.batch_size,
        "--lr",
        config.lr,
        "--warmup",
        config.warmup_steps,
        "--weight-decay",
        config.weight_decay,
        "--grad-clip",
        config.grad_clip,
        "--seed",
        config.seed,
    ]
    if args.max_minutes is not None:
        parts += ["--max-minutes", args.max_minutes]
    if config.scene_weight:
        parts += ["--scene-weight", config.scene_weight]
    if config.full_mask_share:
        parts += ["--full-mask-share", config.full_mask_share]
    if args.tower_data:
        parts += ["--tower-data", args.tower_data, "--tower-steps", config.tower_steps]
        parts += ["--tower-batch", config.tower_batch]
        if args.tower_minutes is not None:
            parts += ["--tower-minutes", args.tower_minutes]
        if not config.tower_freeze:
            parts.append("--tower-unfrozen")
    if args.init_from:  # the schema and the size are the folder's
        parts += ["--init-from", args.init_from]
        return " ".join(shlex.quote(str(p)) for p in parts)
    parts += [
        "--horizon",
        schema.horizon,
        "--bins",
        schema.num_bins,
        "--block-size",
        mc.block_size,
        "--num-frames",
        mc.num_frames,
        "--instruction-budget",
        schema.instruction_budget,
        "--range-quantile",
        args.range_quantile,
    ]
    if mc.vision.keypoints:
        parts += ["--vision-keypoints", mc.vision.keypoints]
    if mc.vision.scene:
        parts.append("--vision-scene-token")
    return " ".join(shlex.quote(str(p)) for p in parts)
