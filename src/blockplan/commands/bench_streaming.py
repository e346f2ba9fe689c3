"""`blockplan bench --streaming`: the streaming-prefill part of the bench command.

Kept apart from `bench.py` so the decoding bench and this one change independently. Writes
`{"streaming": {"prefill_cost_ratio", "max_abs_logit_diff", "ticks", ...}}` (see
`bench/streaming.py`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from blockplan.commands.outputs import print_report
from blockplan.config import PlannerConfig
from blockplan.model.config import ModelConfigError


def add_streaming_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("streaming (--streaming)")
    group.add_argument(
        "--streaming",
        action="store_true",
        help="bench the streaming frame window (streamed vs full encode + prefill) instead",
    )
    group.add_argument("--ticks", type=int, default=50, help="stream ticks (default 50)")
    group.add_argument(
        "--plans", type=int, default=5, help="ticks also planned both ways (drift, latency)"
    )
    group.add_argument(
        "--image-size",
        default="90x160",
        metavar="HxW",
        help="camera image size of the stream (default 90x160; the model resizes)",
    )
    group.add_argument(
        "--grid",
        metavar="RxC",
        help="--random-init only: visual tokens per image as a grid (default the preset's)",
    )
    group.add_argument(
        "--frames", type=int, default=4, help="T frames per camera for --random-init (default 4)"
    )


def run_streaming(args: argparse.Namespace, config: PlannerConfig) -> int:
    from blockplan.bench.streaming import run_streaming_bench
    from blockplan.planner.planner import Planner

    try:
        height, width = (int(v) for v in args.image_size.lower().split("x"))
    except ValueError:
        height = width = 0
    if args.ticks < 2 or args.plans < 0 or args.frames < 1 or min(height, width) < 8:
        print(
            "error: --ticks must be >= 2, --plans >= 0, --frames >= 1, --image-size HxW >= 8",
            file=sys.stderr,
        )
        return 2
    if config.model.backend != "torch":
        print(
            f"error: --streaming: model.backend={config.model.backend!r}; streaming runs on "
            "the torch backend",
            file=sys.stderr,
        )
        return 2
    if args.model:
        folder = Path(args.model)
        try:
            frames = int(json.loads((folder / "config.json").read_text())["num_frames"])
        except (OSError, KeyError, ValueError) as e:
            print(f"error: {folder}/config.json: {e}", file=sys.stderr)
            return 1
    else:
        frames = args.frames
    config = config.with_params({"frame_window.num_frames": frames})
    try:
        if args.model:
            planner = Planner.from_folder(Path(args.model), config)
            source = str(args.model)
        elif args.grid:
            planner = _random_init_with_grid(args.random_init, config, args.seed, args.grid)
            source = f"random-init {args.random_init} grid {args.grid}"
        else:
            planner = Planner.random_init(args.random_init, config, seed=args.seed)
            source = f"random-init {args.random_init}"
    except (ModelConfigError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    report = run_streaming_bench(planner, args.ticks, args.plans, image_size=(height, width))
    report["streaming"]["model"] = source
    report["streaming"]["dtype"] = config.model.dtype
    print_report(report, args.json)
    return 0


def _random_init_with_grid(preset: str, config: PlannerConfig, seed: int, grid: str):
    """A random-init planner whose images make rows x cols visual tokens (how the cost ratio
    scales when visual tokens dominate the prompt, as in larger VLAs)."""
    from blockplan.model.vision import parse_grid
    from blockplan.planner.parts import random_parts
    from blockplan.planner.planner import Planner

    try:
        rows, cols = parse_grid(grid)
    except ValueError as e:
        raise ValueError(f"--grid: {e}") from e

    def adjust(mc):  # rows x cols tokens per image; positions for the longer prompt
        decoder = dataclasses.replace(mc.decoder, max_position_embeddings=32768)
        vision = dataclasses.replace(mc.vision, grid=(rows, cols))
        return dataclasses.replace(mc, decoder=decoder, vision=vision)

    p = random_parts(preset, config, seed, adjust=adjust)
    return Planner(p.model, p.tokenizer, p.config, p.schema)
