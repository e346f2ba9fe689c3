"""`blockplan export`: the planner as ONNX graphs (vision per frame, decoder step per W, and
the decoder step with dynamic shapes that ONNX Runtime runs)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from blockplan.config import ConfigError, default_params_path, load_config
from blockplan.export.onnx_export import DEFAULT_WINDOWS

log = logging.getLogger("blockplan.export")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="DIR", help="model folder (config.json, weights, ...)")
    source.add_argument(
        "--random-init", metavar="PRESET", help="random weights of a preset size (e.g. tiny)"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="folder to write")
    parser.add_argument(
        "--windows",
        default=",".join(str(w) for w in DEFAULT_WINDOWS),
        help="comma-separated decoder window sizes W, one static graph each (default: "
        "8,16,32,48,64,96,256; the widest must hold the widest bidirectional window)",
    )
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    parser.add_argument(
        "--max-batch", type=int, help="largest batch (default: rollouts.num_rollouts)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --random-init weights")
    parser.add_argument("--params", help="params YAML (default: the shipped params/planner.yaml)")


def run(args: argparse.Namespace) -> int:
    from blockplan.export.onnx_export import ExportError, export_onnx
    from blockplan.planner.planner import Planner

    try:
        windows = [int(w) for w in args.windows.split(",") if w]
    except ValueError:
        print(f"error: --windows={args.windows!r}: comma-separated integers", file=sys.stderr)
        return 2
    try:
        config = load_config(args.params or default_params_path())
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    # The graphs are exported from the torch model; float32 whatever the params say.
    config = config.with_params({"model.backend": "torch", "model.dtype": "float32"})
    if args.model:
        planner = Planner.from_folder(Path(args.model), config)
        source = str(args.model)
    else:
        planner = Planner.random_init(args.random_init, config, seed=args.seed)
        source = f"random-init {args.random_init} seed {args.seed}"
    block, answer = planner.model.config.block_size, len(planner.scaffold)
    if max(windows, default=0) < block:
        print(
            f"error: --windows={args.windows!r}: the widest must hold a scaffold block "
            f"({block} tokens): spec drafts and the diffusion strategies attend across it",
            file=sys.stderr,
        )
        return 2
    if max(windows) < answer:
        log.warning(
            "--windows: the widest (%d) is narrower than the answer (%d tokens): "
            "full_diffusion will not run on these static graphs",
            max(windows),
            answer,
        )
    max_batch = args.max_batch or config.rollouts.num_rollouts
    log.info("exporting %s to %s (windows %s)", source, args.out, windows)
    try:
        sidecar = export_onnx(
            planner.model,
            args.out,
            planner.cache.max_len,
            max_batch,
            windows,
            args.opset,
            source=source,
        )
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = {
        "out": str(args.out),
        "model_sha256": sidecar["model_sha256"],
        "opset": sidecar["opset"],
        "max_len": sidecar["max_len"],
        "max_batch": sidecar["max_batch"],
        "windows": sidecar["windows"],
        "graphs": {name: g["file"] for name, g in sidecar["graphs"].items()},
        "dynamic": {name: g["file"] for name, g in sidecar.get("dynamic", {}).items()},
    }
    print(json.dumps(summary, indent=2))
    return 0
