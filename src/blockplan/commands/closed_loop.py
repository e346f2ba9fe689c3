"""`blockplan closed-loop`: the planner drives the ego in highway-env; the model, the IDM
expert and the constant-velocity baseline on the same seeds."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from blockplan.config import add_set_argument

POLICIES = ("model", "expert", "constant_velocity")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.sim.scenarios import SCENARIOS

    parser.add_argument("--scenario", default="highway", choices=sorted(SCENARIOS))
    parser.add_argument("--episodes", type=int, default=5, help="number of seeds (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument(
        "--model",
        help="model folder, random-init[:PRESET] or constant-velocity (default: model.dir of the "
        "params file if that folder exists, else random-init)",
    )
    parser.add_argument("--duration", type=float, default=20.0, help="simulated s per episode")
    parser.add_argument(
        "--replan-period",
        type=float,
        default=0.5,
        help="s between plans (runtime ticks); a multiple of 0.05 (default 0.5)",
    )
    parser.add_argument("--control-hz", type=float, default=10.0, help="controller rate (Hz)")
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=POLICIES,
        default=list(POLICIES),
        help="which policies to run (default: all three)",
    )
    parser.add_argument("--render-dir", help="write PNG camera grids of the first planner episode")
    parser.add_argument("--params", help="ROS 2 params YAML (default: the shipped planner.yaml)")
    add_set_argument(parser)
    parser.add_argument("--rig", help="camera rig YAML (default: the shipped rig.yaml)")
    parser.add_argument("--json", required=True, help="output JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _default_model(config) -> str:
    from blockplan.planner.loading import RANDOM_INIT, ModelLoadError, resolve_model_dir

    try:
        resolve_model_dir(config.model.dir)
    except ModelLoadError:
        return RANDOM_INIT
    return config.model.dir


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from blockplan.closedloop import EpisodeSpec, run_evaluation
    from blockplan.config import ConfigError, default_params_path, load_config
    from blockplan.planner.loading import ModelLoadError, load_model
    from blockplan.sim.rig import load_rig
    from blockplan.sim.scenarios import ScenarioError, get_scenario

    if args.episodes < 1:
        print(f"error: --episodes={args.episodes} must be >= 1", file=sys.stderr)
        return 2
    try:
        config = load_config(args.params or default_params_path(), overrides=args.set)
        model = args.model or _default_model(config)
        planners = {}
        if "model" in args.policies:
            planners["model"] = load_model(model, config, where="--model", require_manifest=False)
        if "constant_velocity" in args.policies:
            planners["constant_velocity"] = load_model("constant-velocity", config)
        rig = load_rig(args.rig)
        scenario = get_scenario(args.scenario)
        specs = [
            EpisodeSpec(scenario, args.seed + k, args.duration, args.control_hz, args.replan_period)
            for k in range(args.episodes)
        ]
    except (ConfigError, ModelLoadError, ScenarioError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    bar = tqdm(
        total=len(specs) * len(args.policies),
        unit="episode",
        desc="closed loop",
        disable=args.no_progress,
        file=sys.stderr,
    )
    start = time.perf_counter()
    with bar:
        evaluation = run_evaluation(
            specs, args.policies, planners, config, rig, args.render_dir, progress=bar
        )
    doc = evaluation.summary()
    doc["run"] = {
        "scenario": scenario.name,
        "seeds": [s.seed for s in specs if s.seed not in evaluation.skipped_seeds],
        "skipped_seeds_expert_crashed_in_warmup": evaluation.skipped_seeds,
        "model": model if "model" in args.policies else None,
        "decoding": config.decoding.strategy,
        "duration_s": args.duration,
        "replan_period_s": args.replan_period,
        "control_hz": args.control_hz,
        "wall_s": round(time.perf_counter() - start, 1),
        "frames": [str(p) for p in evaluation.frames],
    }
    doc["episodes"] = evaluation.episodes()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    for policy in args.policies:
        m = doc[policy]
        if m["episodes"]:
            print(
                f"{policy:>18}: collisions {m['collision_rate']:.2f}  progress "
                f"{m['progress_m']:.1f} m  lane departures {m['lane_departure_rate']:.2f}  "
                f"|jerk| {m['mean_abs_jerk']:.3f} m/s^3  ({m['episodes']} episodes)"
            )
    print(f"wrote {args.json}")
    return 0
