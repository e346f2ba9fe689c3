"""`blockplan train`: train a planner with the SASD recipe on simulator shards or Fast-dDrive
JSON records, in one process or under `torchrun --nproc_per_node N -m blockplan.cli train`."""

from __future__ import annotations

import argparse
import json
import logging
import sys

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.train.recipe import ARCHS

    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="a `blockplan dataset` folder (train/val splits)")
    src.add_argument("--fastddrive", help="a Fast-dDrive JSON file of training records")
    parser.add_argument("--val-fastddrive", help="Fast-dDrive JSON validation records")
    parser.add_argument("--out", required=True, help="run folder: metrics, checkpoint, best")
    parser.add_argument("--arch", default="reference", choices=sorted(ARCHS),
                        help="model size (reference)")  # fmt: skip
    parser.add_argument("--cameras", nargs="+",
                        default=["front_left", "front", "front_right", "rear"],
                        help="camera names, in the model's (view-major) order")  # fmt: skip
    parser.add_argument("--num-frames", type=int, default=2, help="frames per camera (2)")
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per rank (8)")
    parser.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (2e-3)")
    parser.add_argument("--warmup", type=int, default=50, help="warm-up steps (50)")
    parser.add_argument("--weight-decay", type=float, default=0.01, help="AdamW decay (0.01)")
    parser.add_argument("--grad-clip", type=float, default=1.0, help="max grad norm (1.0)")
    parser.add_argument("--seed", type=int, default=0, help="seed of init, order, noise (0)")
    parser.add_argument("--log-every", type=int, default=5, help="steps per log line (5)")
    parser.add_argument("--save-every", type=int, default=50, help="steps per checkpoint (50)")
    parser.add_argument("--val-samples", type=int, default=48,
                        help="validation samples per checkpoint (48)")  # fmt: skip
    parser.add_argument("--max-minutes", type=float,
                        help="stop and save after this much wall time")  # fmt: skip
    parser.add_argument("--resume", action="store_true",
                        help="continue from OUT/checkpoint when it exists")  # fmt: skip
    parser.add_argument("--init-from",
                        help="start from this model folder's weights (fine-tuning)")  # fmt: skip
    parser.add_argument("--num-threads", type=int, default=2, help="torch CPU threads (2)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="where to train (auto: cuda when available)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    import torch

    from blockplan.train.distributed import close_distributed, init_distributed
    from blockplan.train.examples import DataError, load_examples, load_fastddrive
    from blockplan.train.recipe import Recipe
    from blockplan.train.trainer import TrainConfig, Trainer, TrainError

    torch.set_num_threads(args.num_threads)
    ctx = init_distributed(args.device)
    try:
        # A simulator data set records its frame spacing; the model's config.json keeps it.
        period = None
        if args.data:
            from blockplan.train.examples import read_manifest

            period = read_manifest(args.data).get("options", {}).get("frame_period_s")
        recipe = Recipe.build(
            args.arch, tuple(args.cameras), args.num_frames, frame_period_s=period
        )
        show = ctx.is_main
        if args.data:
            train_set = load_examples(args.data, "train", recipe, progress=show)
            try:
                val_set = load_examples(args.data, "val", recipe, progress=show)
            except DataError as e:
                log.warning("no validation split (%s): best = latest", e)
                val_set = None
        else:
            train_set = load_fastddrive(args.fastddrive, recipe)
            val_set = load_fastddrive(args.val_fastddrive, recipe) if args.val_fastddrive else None
        config = TrainConfig(
            steps=args.steps, batch_size=args.batch_size, lr=args.lr,
            weight_decay=args.weight_decay, warmup_steps=args.warmup, grad_clip=args.grad_clip,
            seed=args.seed, log_every=args.log_every, save_every=args.save_every,
            val_samples=args.val_samples, max_minutes=args.max_minutes,
        )  # fmt: skip
        trainer = Trainer(recipe, train_set, args.out, config, ctx, val_set)
        if args.resume and trainer.resume():
            log.info("resumed from step %d", trainer.step)
        elif args.init_from:
            trainer.init_from(args.init_from)
        if ctx.is_main:
            log.info("%d parameters, %d train samples, %d per epoch per rank",
                     trainer.model.num_parameters(), len(train_set),
                     trainer.steps_per_epoch * config.batch_size)  # fmt: skip
        final = trainer.fit()
    except (DataError, TrainError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        close_distributed(ctx)
    if ctx.is_main:
        print(json.dumps(final))
    return 0
