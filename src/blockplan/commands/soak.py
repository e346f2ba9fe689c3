"""`blockplan soak`: the runtime for a stated virtual time on a bag played in a loop, with
memory, latency, fallbacks and queue depths per virtual minute (blockplan.replay.soak)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from blockplan.cli import EXIT_INTERRUPTED
from blockplan.config import add_set_argument
from blockplan.errors import UserError


class SoakError(UserError):
    """A soak that cannot start (options, bag, output folder)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--minutes", type=float, required=True,
                        help="virtual minutes to run (the bag loops until then)")  # fmt: skip
    parser.add_argument("--out", required=True,
                        help="output folder: metrics.json (rewritten every virtual minute), "
                        "soak.png, report.html")  # fmt: skip
    parser.add_argument("--bag", help="the bag to loop: `blockplan simulate` (vehicle) or "
                        "`blockplan robot-demos` (robot); default: one simulated into OUT/")  # fmt: skip
    parser.add_argument("--embodiment", default="vehicle", choices=["vehicle", "robot"],
                        help="robot: a robot model and bag through RobotRuntime")  # fmt: skip
    parser.add_argument("--model", help="model folder (default: the params file's, or the "
                        "shipped robot model), random-init[:PRESET] or constant-velocity")  # fmt: skip
    parser.add_argument("--params", help="ROS 2 params YAML (default: planner.yaml / robot.yaml)")
    parser.add_argument("--rate", type=float, help="control rate in Hz (vehicle: control.rate_hz;"
                        " robot: a tick per recorded step)")  # fmt: skip
    add_set_argument(parser)
    parser.add_argument("--bag-seconds", type=float, default=30.0,
                        help="length of the bag simulated when no --bag is given (30)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the simulated bag (0)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a target is missed (default: 0 whenever it ran)")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no line per virtual minute")


def _simulated_vehicle_bag(out: Path, seconds: float, seed: int) -> Path:
    from blockplan.sim.bag import write_episode_bag
    from blockplan.sim.episode import run_episode
    from blockplan.sim.labels import HORIZON_S, explanation_budget_fits
    from blockplan.sim.rig import load_rig
    from blockplan.sim.scenarios import get_scenario

    path = out / f"highway_seed{seed}_{seconds:g}s.mcap"
    if path.exists():
        return path
    log = run_episode(get_scenario("highway"), seed, seconds + HORIZON_S)
    if log.crashed_at is not None:
        raise SoakError(f"--seed {seed}: the expert crashed in the simulated bag; try another")
    write_episode_bag(log, load_rig(None), path, seconds, fits=explanation_budget_fits())
    return path


def _simulated_robot_bag(out: Path, seed: int) -> Path:
    from blockplan.sim.manipulation import ManipulationEnv, run_expert
    from blockplan.sim.robot_bag import write_demo_bag

    path = out / f"pick-place_seed{seed}.mcap"
    if path.exists():
        return path
    env = ManipulationEnv("pick-place", 64, ("front", "wrist"))
    try:
        demo = run_expert(env, seed, 4, 200, tail=200)  # 2.5 s: the whole 200 steps
    finally:
        close = getattr(env, "close", None)
        if close is not None:
            close()
    write_demo_bag(demo, path, extra={"render_every": 4})
    return path


def _minute_line(total: float):
    def line(row: dict) -> None:
        lat = row["plan_latency_ms"]
        print(
            f"soak minute {row['minute']}/{total:g}: loop {row['loop']} RSS {row['rss_mb']:.1f} "
            f"MiB, {row['heap_objects']} objects, plan p50/p99 {lat['p50']}/{lat['p99']} ms, "
            f"tick p99 {row['tick_ms']['p99']} ms, {row['ticks']} ticks {row['published']} "
            f"published, {row['fallbacks']} fallbacks ({row['boundary_fallbacks']} at a loop), "
            f"{row['wall_s']} s wall",
            file=sys.stderr,
            flush=True,
        )

    return line


def run(args: argparse.Namespace) -> int:
    from blockplan.replay.soak import soak_robot, soak_vehicle, summary_lines

    if not (math.isfinite(args.minutes) and args.minutes > 0):
        raise SoakError(f"--minutes {args.minutes:g}: must be > 0")
    if not (math.isfinite(args.bag_seconds) and args.bag_seconds >= 2):
        raise SoakError(f"--bag-seconds {args.bag_seconds:g}: must be >= 2")
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        raise SoakError(f"--rate {args.rate:g}: must be a control rate in Hz > 0")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise SoakError(f"--out {out} is a file, not a folder")
    if (out / "metrics.json").exists():
        raise SoakError(f"{out / 'metrics.json'} exists (an earlier soak's): pass another --out")
    if args.bag is not None and not Path(args.bag).exists():
        raise SoakError(f"--bag {args.bag}: no such bag")
    out.mkdir(parents=True, exist_ok=True)
    on_minute = None if args.quiet else _minute_line(args.minutes)
    if args.embodiment == "robot":
        from blockplan.commands.closed_loop import DEFAULT_ROBOT_MODEL, robot_planner

        model = args.model or DEFAULT_ROBOT_MODEL
        config, planner = robot_planner(model, args.params, args.set, args.rate or 80.0)
        bag = Path(args.bag) if args.bag else _simulated_robot_bag(out, args.seed)
        meta = {"model": model, "weights": getattr(planner, "weights", None)}
        metrics = soak_robot(bag, planner, config, args.minutes, out, meta, on_minute=on_minute)
    else:
        from blockplan.commands.replay import replay_config
        from blockplan.planner.loading import weights_of
        from blockplan.replay import check_bag, load_planner

        args.timing = "ideal"
        config = replay_config(args)
        bag = (
            Path(args.bag) if args.bag else _simulated_vehicle_bag(out, args.bag_seconds, args.seed)
        )
        check_bag(bag, config)
        model = args.model or config.model.dir
        planner = load_planner(model, config)
        meta = {"model": model, "weights": weights_of(planner)}
        metrics = soak_vehicle(bag, planner, config, args.minutes, out, meta, on_minute=on_minute)
    s = metrics["summary"]
    print(
        f"\nsoak of {metrics['model']} ({metrics['embodiment']}): {s['virtual_minutes']} of "
        f"{args.minutes:g} virtual minutes, {s['loops']} passes over {bag}, {s['ticks']} ticks, "
        f"{s['plans']} plans, {s['wall_s']} s wall"
    )
    print("\n".join(summary_lines(metrics)))
    print(f"  metrics {out / 'metrics.json'}\n  plot    {out / 'soak.png'}\n  report  "
          f"{out / 'report.html'}")  # fmt: skip
    if metrics["interrupted"]:
        return EXIT_INTERRUPTED
    if args.check and not metrics["targets_met"]:
        return 1
    return 0
