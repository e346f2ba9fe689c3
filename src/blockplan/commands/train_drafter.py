"""`blockplan train-drafter`: a DFlash drafter folder for a model, distilled from the model's
own greedy answers (`train/drafter.py`); plan with it through `decoding.strategy: dflash`
and `decoding.drafter: DIR`."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import torch

from blockplan.config import ConfigError, add_set_argument, default_params_path, load_config

log = logging.getLogger("blockplan.train_drafter")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="DIR", help="the target model folder")
    source.add_argument(
        "--random-init",
        metavar="PRESET",
        help="a random-weight target of a preset size (what `blockplan bench --random-init` "
        "builds with the same --seed and --layers)",
    )
    parser.add_argument("--layers", type=int, metavar="N", help="with --random-init: N layers")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random target (0)")
    parser.add_argument(
        "--data", metavar="DIR", help="a data set folder (blockplan dataset): its observations"
    )
    parser.add_argument(
        "--synthetic",
        type=int,
        metavar="N",
        help="N synthetic observations (those `blockplan bench` plans, from --synthetic-seed); "
        "with --data: both",
    )
    parser.add_argument(
        "--synthetic-seed",
        type=int,
        default=1000,
        help="first seed of the synthetic observations (1000: apart from the bench's 0..)",
    )
    parser.add_argument("--split", default="train", help="--data: the split to read (train)")
    parser.add_argument("--limit", type=int, help="--data: at most this many observations")
    parser.add_argument("--out", required=True, metavar="DIR", help="the drafter folder to write")
    parser.add_argument("--steps", type=int, default=800, help="optimizer steps (800)")
    parser.add_argument("--batch-size", type=int, default=32, help="windows per step (32)")
    parser.add_argument("--lr", type=float, default=3e-3, help="peak learning rate (3e-3)")
    parser.add_argument("--hidden-size", type=int, default=128, help="drafter width (128)")
    parser.add_argument(
        "--intermediate-size", type=int, default=256, help="drafter MLP width (256)"
    )
    parser.add_argument("--drafter-layers", type=int, default=1, help="drafter decoder layers (1)")
    parser.add_argument("--context", type=int, default=8, help="target positions read (8)")
    parser.add_argument(
        "--answers",
        default="scaffold_spec",
        choices=("scaffold_spec", "ar"),
        help="the lossless greedy strategy that writes the target's answers (scaffold_spec)",
    )
    parser.add_argument("--params", help="params YAML (default: the shipped params/planner.yaml)")
    add_set_argument(parser)
    parser.add_argument("--threads", type=int, help="torch CPU threads")


def run(args: argparse.Namespace) -> int:
    from blockplan.commands.bench import _is_qwen_source
    from blockplan.model.drafter import save_drafter
    from blockplan.planner.planner import Planner
    from blockplan.planner.synthetic import synthetic_input
    from blockplan.train.drafter import DrafterOptions, train_drafter

    if args.layers is not None and (args.layers < 1 or not args.random_init):
        print("error: --layers needs --random-init and must be >= 1", file=sys.stderr)
        return 2
    if not args.data and not args.synthetic:
        print("error: --data DIR or --synthetic N (or both) must be given", file=sys.stderr)
        return 2
    try:
        config = load_config(args.params or default_params_path(), overrides=args.set)
        # eager torch: the feature pass reads the decoder's hidden states
        config = config.with_params({"model.backend": "torch", "decoding.drafter": ""})
        if args.threads:
            config = config.with_params({"model.num_threads": args.threads})
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    torch.set_num_threads(config.model.num_threads)
    if not args.params and _is_qwen_source(args):
        from blockplan.planner.qwen import fastddrive_config

        config = fastddrive_config(config)
    if args.model:
        planner = Planner.from_folder(Path(args.model), config)
        source = str(args.model)
    else:
        planner = Planner.random_init(
            args.random_init, config, seed=args.seed, num_layers=args.layers
        )
        source = f"random-init {args.random_init} seed {args.seed} layers {args.layers}"
    observations = []
    if args.data:
        from blockplan.sim.dataset import iter_split

        for obs, _ in iter_split(args.data, args.split):
            observations.append(obs)
            if args.limit and len(observations) >= args.limit:
                break
    observations += [
        synthetic_input(planner.config, args.synthetic_seed + i, planner.schema)
        for i in range(args.synthetic or 0)
    ]
    if len(observations) < 2:
        print("error: fewer than 2 observations to train on", file=sys.stderr)
        return 1
    options = DrafterOptions(
        hidden_size=args.hidden_size,
        intermediate_size=args.intermediate_size,
        num_layers=args.drafter_layers,
        context=args.context,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        answer_strategy=args.answers,
    )
    drafter, report = train_drafter(planner, observations, options, say=log.info)
    report["target"] = source
    report["observations"] = {
        "data": args.data,
        "synthetic": args.synthetic or 0,
        "synthetic_seed": args.synthetic_seed,
    }
    object.__setattr__(drafter.config, "extra", dict(report))
    save_drafter(drafter, args.out)
    print(json.dumps({"out": str(args.out), **report}, indent=2))
    return 0
