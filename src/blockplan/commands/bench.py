"""`blockplan bench`: latency, forwards and tokens per step of every decoding strategy."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from pathlib import Path

import torch

from blockplan.commands.outputs import print_report
from blockplan.config import (
    BACKENDS,
    STRATEGIES,
    ConfigError,
    add_set_argument,
    default_params_path,
    load_config,
)

log = logging.getLogger("blockplan.bench")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="DIR", help="model folder (config.json, weights, ...)")
    source.add_argument(
        "--random-init",
        metavar="PRESET",
        help="random weights of a preset size (e.g. tiny; qwen2.5-vl-3b for Fast-dDrive's "
        "backbone shape, use with --dtype bfloat16)",
    )
    parser.add_argument(
        "--strategies",
        help=f"comma-separated strategies to run (default: all of {','.join(STRATEGIES)}; for "
        "a robot model ar,full_diffusion,section_diffusion,pipelined)",
    )
    parser.add_argument("--rollouts", type=int, default=4, help="N for the rollouts strategy")
    parser.add_argument("--iters", type=int, default=5, help="timed plans per strategy")
    parser.add_argument("--warmup", type=int, default=1, help="untimed plans per strategy first")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs and weights")
    parser.add_argument(
        "--bag",
        metavar="BAG",
        help="plan the consecutive observations the control loop builds from this recorded "
        "bag (every tick, ideal timing) instead of independent synthetic inputs: each "
        "strategy drafts from its own previous answer, as the node does",
    )
    parser.add_argument(
        "--drafter",
        metavar="DIR",
        help="= --set decoding.drafter=DIR: a DFlash drafter folder made for this model "
        "(blockplan train-drafter); adds the dflash strategy to the default list",
    )
    parser.add_argument("--params", help="params YAML (default: the shipped params/planner.yaml)")
    add_set_argument(parser)
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (= --set model.num_threads=N)"
    )
    parser.add_argument("--dtype", help="= --set model.dtype=NAME (float32, float64, ...)")
    parser.add_argument(
        "--device",
        help="= --set model.device=DEVICE (cpu, cuda, cuda:N): where the torch backend runs "
        "the model, its K/V cache and the images",
    )
    parser.add_argument(
        "--layers",
        type=int,
        metavar="N",
        help="with --random-init: the preset's widths, vocabulary and token counts but only N "
        "decoder layers (and ViT blocks): a short smoke run of a big shape on a CPU",
    )
    parser.add_argument(
        "--backend",
        help=f"= --set model.backend=NAME ({'|'.join(BACKENDS)}; onnxruntime exports the "
        "model in-process first); a comma-separated list compares backends in one "
        "interleaved run",
    )
    parser.add_argument(
        "--no-hf", action="store_true", help="skip the transformers generate baseline"
    )
    parser.add_argument(
        "--no-compute-floor",
        action="store_true",
        help="skip the compute floor (a GEMM micro-benchmark and one FLOP-counted plan per "
        "strategy; torch backend on a CPU only)",
    )
    parser.add_argument(
        "--compare-graphs",
        action="store_true",
        help="eager against the static-shape decode of model.cuda_graphs in one interleaved "
        "run (replayed CUDA graphs on a GPU; on a CPU the same path without capture), with "
        "ms per forward by window width (bench/graphs.py)",
    )
    parser.add_argument(
        "--forward-reps",
        type=int,
        default=10,
        help="--compare-graphs, --quantized: timed calls per width",
    )
    parser.add_argument(
        "--bandwidth-gbs",
        type=float,
        help="--compare-graphs: the device's memory bandwidth in GB/s (e.g. 4800 for an H200), "
        "for each forward's ratio to the bandwidth floor",
    )
    parser.add_argument(
        "--quantized",
        metavar="SCHEMES",
        help="comma-separated schemes (int8,fp8,w4): the model against its quantized copies "
        "in one interleaved run (plans, ms per forward, weight bytes; bench/quantized.py)",
    )
    parser.add_argument(
        "--forwards-only",
        action="store_true",
        help="--quantized: no plans, only ms per forward (and weight bytes): a big shape on a "
        "busy CPU",
    )
    parser.add_argument(
        "--forward-past",
        type=int,
        metavar="N",
        help="--quantized: cache slots before each timed forward (default: the prompt length)",
    )
    parser.add_argument(
        "--forward-rounds", type=int, default=3, help="--quantized: interleaved rounds"
    )
    parser.add_argument(
        "--ort-forwards",
        action="store_true",
        help="--quantized: also ONNX Runtime's decoder step, float32 against INT8",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report to this file")
    from blockplan.commands.bench_streaming import add_streaming_arguments

    add_streaming_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from blockplan.bench.decoding import run_bench
    from blockplan.planner.planner import Planner, PlannerSetupError

    strategies = [s for s in (args.strategies or "").split(",") if s]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        print(f"error: --strategies: unknown {unknown}; known {list(STRATEGIES)}", file=sys.stderr)
        return 2
    backends = [b for b in (args.backend or "").split(",") if b]
    if [b for b in backends if b not in BACKENDS]:
        print(f"error: --backend={args.backend!r}: known {list(BACKENDS)}", file=sys.stderr)
        return 2
    if args.rollouts < 1 or args.iters < 1 or args.warmup < 0:
        print("error: --rollouts and --iters must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    if args.layers is not None and (args.layers < 1 or not args.random_init):
        print("error: --layers needs --random-init and must be >= 1", file=sys.stderr)
        return 2
    try:
        config = load_config(args.params or default_params_path(), overrides=args.set)
        # The shorthands are --set model.<name>=VALUE (a comma list of backends compares them).
        shorthands = {
            "model.dtype": args.dtype,
            "model.device": args.device,
            "model.num_threads": args.threads,
            "model.backend": backends[0] if backends else None,
            "decoding.drafter": args.drafter,
        }
        config = config.with_params({k: v for k, v in shorthands.items() if v is not None})
        if (args.streaming or args.compare_graphs) and config.model.backend == "auto":
            # both measure torch's own paths (its streaming prefill, its static buckets)
            config = config.with_params({"model.backend": "torch"})
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    torch.set_num_threads(config.model.num_threads)
    if args.streaming:
        from blockplan.commands.bench_streaming import run_streaming

        return run_streaming(args, config)
    if not args.params and _is_qwen_source(args):
        from blockplan.planner.qwen import fastddrive_config

        config = fastddrive_config(config)  # Fast-dDrive's 3 cameras, 1 frame each
    robot = None if args.params else _robot_source(args)
    if robot is not None:
        from blockplan.planner.embodiment import robot_config

        config = robot_config(config, *robot)  # the robot's cameras and frames
    try:
        if args.model:
            planner = Planner.from_folder(Path(args.model), config)
            source = str(args.model)
        else:
            planner = Planner.random_init(
                args.random_init, config, seed=args.seed, num_layers=args.layers
            )
            source = f"random-init {args.random_init}"
            if args.layers is not None:
                source += f" ({args.layers} layers: a smoke run, not the preset's latency)"
    except PlannerSetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not strategies:
        strategies = list(_default_strategies(planner))
    if args.quantized:
        return _compare_quantized(planner, strategies, args, source)
    if len(backends) > 1:
        return _compare_backends(planner, backends, strategies, args, source)
    if args.compare_graphs:
        return _compare_graphs(planner, strategies, args, source)
    with_hf = not args.no_hf and importlib.util.find_spec("transformers") is not None
    sequence = None
    if args.bag:
        sequence = _bag_sequence(args.bag, planner, args.warmup + args.iters)
        if sequence is None:
            return 1
    report = run_bench(
        planner,
        strategies,
        args.rollouts,
        args.iters,
        args.warmup,
        args.seed,
        with_hf=with_hf,
        progress=log.info,
        with_floor=not args.no_compute_floor,
        sequence=sequence,
        source=args.bag,
    )
    report["model"] = {"source": source, "backend": planner.runner.name, **report["model"]}
    report["model"]["cuda_graphs"] = planner.config.model.cuda_graphs
    if hasattr(planner.runner, "report"):  # model.cuda_graphs: what ran in the buckets
        report["graphs"] = planner.runner.report()
    if args.model:  # what the loader found: sha256-verified, or unverified (no manifest)
        report["model"]["weights"] = planner.weights
    print_report(report, args.json)
    return 0


def _bag_sequence(bag: str, planner, needed: int):
    """The observations replay builds from `bag` for `planner` (None, said, when the bag
    cannot be read or holds fewer than `needed`)."""
    from blockplan.bags import BagError
    from blockplan.replay.observations import bag_observations

    if getattr(planner.model.config, "embodiment", "vehicle") != "vehicle":
        print("error: --bag: a driving bag needs a vehicle model", file=sys.stderr)
        return None
    log.info("bench: the observations of %s (replay, ideal timing)", bag)
    try:
        sequence = bag_observations(
            bag,
            planner.config,
            planner.schema,
            getattr(planner, "reads_lane_pose", False),
            getattr(planner, "reads_lead", False),
        )
    except (BagError, OSError) as e:
        print(f"error: --bag {bag}: {e}", file=sys.stderr)
        return None
    if len(sequence) < needed:
        print(
            f"error: --bag {bag}: {len(sequence)} observations, --warmup + --iters needs {needed}",
            file=sys.stderr,
        )
        return None
    return sequence


def _compare_backends(planner, backends, strategies, args, source: str) -> int:
    from blockplan.bench.backends import run_backend_bench
    from blockplan.planner.planner import Planner

    base = planner.config.with_params({"rollouts.num_rollouts": args.rollouts})
    folder = Path(args.model) if args.model else None
    planners = {}
    for name in backends:
        log.info("bench: setting up backend %s", name)
        config = base.with_params({"model.backend": name})
        planners[name] = Planner(
            planner.model, planner.tokenizer, config, planner.schema, folder=folder
        )
    report = run_backend_bench(
        planners, strategies, args.iters, args.warmup, args.seed, progress=log.info
    )
    report["model"] = {"source": source, **report["model"]}
    print_report(report, args.json)
    return 0


def _compare_quantized(planner, strategies, args, source: str) -> int:
    from blockplan.bench.quantized import run_quantized_bench
    from blockplan.model.quantized import SCHEMES

    schemes = [s for s in args.quantized.split(",") if s]
    if not schemes or [s for s in schemes if s not in SCHEMES]:
        print(f"error: --quantized={args.quantized!r}: known {list(SCHEMES)}", file=sys.stderr)
        return 2
    report = run_quantized_bench(
        planner,
        schemes,
        [] if args.forwards_only else strategies,
        args.iters,
        args.warmup,
        args.seed,
        reps=args.forward_reps,
        rounds=args.forward_rounds,
        past=args.forward_past,
        ort_forwards=args.ort_forwards,
        progress=log.info,
    )
    report["model"] = {"source": source, "backend": planner.runner.name, **report.get("model", {})}
    print_report(report, args.json)
    return 0


def _compare_graphs(planner, strategies, args, source: str) -> int:
    from blockplan.bench.graphs import run_graph_bench

    if planner.runner.name != "torch" or planner.config.model.cuda_graphs:
        print(
            "error: --compare-graphs runs the torch backend with model.cuda_graphs=false "
            "against the graph path itself",
            file=sys.stderr,
        )
        return 2
    if args.forward_reps < 1:
        print("error: --forward-reps must be >= 1", file=sys.stderr)
        return 2
    report = run_graph_bench(
        planner,
        strategies,
        args.rollouts,
        args.iters,
        args.warmup,
        args.seed,
        reps=args.forward_reps,
        bandwidth_gbs=args.bandwidth_gbs,
        progress=log.info,
    )
    report["model"] = {"source": source, **report["model"]}
    print_report(report, args.json)
    return 0


def _is_qwen_source(args: argparse.Namespace) -> bool:
    """Whether the bench runs a Qwen2.5-VL model (a random-init preset or a folder)."""
    from blockplan.model.config import ModelConfigError
    from blockplan.model.qwen2_5_vl.presets import QWEN_PRESETS
    from blockplan.model.weights import read_config

    if args.random_init:
        return args.random_init in QWEN_PRESETS
    try:
        return read_config(args.model).get("model_type") == "qwen2_5_vl"
    except ModelConfigError:  # the loader says what is wrong, after checking the manifest
        return False


def _robot_source(args: argparse.Namespace) -> tuple[tuple[str, ...], int] | None:
    """(cameras, frames per camera) when the bench runs a robot model, else None."""
    from blockplan.model.config import ModelConfigError
    from blockplan.model.presets import robot_preset_names
    from blockplan.model.weights import read_config
    from blockplan.schema.action import ROBOT_CAMERAS

    if args.random_init:
        return (ROBOT_CAMERAS, 1) if args.random_init in robot_preset_names() else None
    try:
        raw = read_config(args.model)
    except ModelConfigError:  # the loader says what is wrong, after checking the manifest
        return None
    if raw.get("embodiment") != "robot":
        return None
    return tuple(raw["camera_names"]), int(raw["num_frames"])


def _default_strategies(planner) -> tuple[str, ...]:
    from blockplan.planner.embodiment import ROBOT_BENCH_STRATEGIES

    if planner.config.model.embodiment == "robot":
        return ROBOT_BENCH_STRATEGIES
    if planner.flow is not None:  # the strategies that decode a flow head's text sections
        from blockplan.decoding.strategies import FLOW_STRATEGIES

        return FLOW_STRATEGIES
    if planner.drafter is None or planner.runner.name != "torch":
        return tuple(s for s in STRATEGIES if s != "dflash")  # dflash needs both
    return STRATEGIES
