"""`blockplan demo`: simulate a short scenario, replay it with the shipped model, print the
summary and where the report is.

The model is `model.dir` of the params file when that folder holds a model, otherwise a
randomly initialised one (until the reference model ships). The replay uses measured timing
by default, so the wall time stays bounded whatever the model costs on this machine: a slow
model simply gets fewer plans, and the fallbacks show it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tqdm import tqdm

from blockplan.cli import EXIT_INTERRUPTED
from blockplan.config import PlannerConfig, default_params_path, load_config
from blockplan.replay import ReplayInputError, ReplayInterrupted, load_planner, run_replay
from blockplan.replay.planners import RANDOM_INIT, resolve_model_dir

log = logging.getLogger(__name__)
# What a demo writes into its folder (and may replace on the next run).
DEMO_FILES = (
    "sim.mcap",
    "plans.mcap",
    "metrics.json",
    "report.html",
    "latency.png",
    "displacement.png",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.sim.scenarios import SCENARIOS

    parser.add_argument(
        "--out", help="output folder (default out/demo; --embodiment robot: out/robot-demo)"
    )
    parser.add_argument(
        "--scenario", default="highway", choices=sorted(SCENARIOS), help="highway-env scenario"
    )
    parser.add_argument("--seed", type=int, default=0, help="episode seed (default 0)")
    parser.add_argument(
        "--duration", type=float, default=8.0, help="seconds to simulate (default 8)"
    )
    parser.add_argument(
        "--model",
        help="model folder, random-init[:PRESET] or constant-velocity (default: model.dir of "
        "the params file if it holds a model, else random-init)",
    )
    parser.add_argument(
        "--timing",
        choices=("ideal", "measured"),
        default="measured",
        help="replay timing (default measured: bounded wall time with any model)",
    )
    parser.add_argument("--params", help="ROS 2 params YAML (default: the shipped planner.yaml)")
    parser.add_argument(
        "--embodiment",
        default="vehicle",
        choices=["vehicle", "robot"],
        help="robot: one Meta-World episode with the shipped robot model in "
        "closed loop, recorded as a bag, replayed and reported",
    )
    parser.add_argument("--task", default="reach", help="robot: Meta-World task (reach)")
    parser.add_argument("--max-steps", type=int, default=100, help="robot: control steps (100)")


def default_model(config: PlannerConfig) -> str:
    try:
        folder = resolve_model_dir(config.model.dir)
    except ReplayInputError:
        folder = None
    if folder is not None and (folder / "config.json").is_file():
        return str(folder)
    log.warning("no model in %s yet: the demo runs a randomly initialised one", config.model.dir)
    return RANDOM_INIT


def simulate(args: argparse.Namespace, bag: Path) -> None:
    from blockplan.sim.bag import write_episode_bag
    from blockplan.sim.episode import run_episode
    from blockplan.sim.labels import HORIZON_S, explanation_budget_fits
    from blockplan.sim.rig import load_rig
    from blockplan.sim.scenarios import get_scenario

    rig = load_rig(None)
    episode = run_episode(get_scenario(args.scenario), args.seed, args.duration + HORIZON_S)
    if episode.crashed_at is not None:
        raise ReplayInputError(
            f"the simulated expert crashed at t={episode.crashed_at:.2f} s "
            f"({args.scenario}, seed {args.seed}); try another --seed"
        )
    write_episode_bag(episode, rig, bag, args.duration, fits=explanation_budget_fits())


ROBOT_DEMO_FILES = ("episode.mcap", "metrics.json", "actions.png", "report.html")
DEMO_OUT = "out/demo"
ROBOT_DEMO_OUT = "out/robot-demo"  # not out/demo: `make demo` then the robot demo both work
ROBOT_DEMO_SEED = 900_000  # outside every data split (sim/manipulation.seeds_of)


def run_robot(args: argparse.Namespace) -> int:
    """A short robot episode end to end: the shipped model drives the Sawyer in Meta-World
    through RobotRuntime, the run is written as a ROS 2 bag (episode.mcap) and replayed into
    the report."""
    from blockplan.closedloop.robot import START_NS, model_actor, run_episode
    from blockplan.commands.closed_loop import DEFAULT_ROBOT_MODEL, robot_planner
    from blockplan.replay.robot import replay_robot_bag, write_robot_report
    from blockplan.runtime.clock import VirtualClock
    from blockplan.runtime.robot import RobotRuntime
    from blockplan.sim.manipulation import CONTROL_PERIOD_S, ManipulationEnv
    from blockplan.sim.robot_bag import write_demo_bag

    out = Path(args.out or ROBOT_DEMO_OUT)
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if p.name not in ROBOT_DEMO_FILES)
        if others:
            print(
                f"error: {out} holds files a robot demo did not write ({', '.join(others)}); "
                "pass another --out",
                file=sys.stderr,
            )
            return 1
        for name in ROBOT_DEMO_FILES:
            (out / name).unlink(missing_ok=True)
    model = args.model or DEFAULT_ROBOT_MODEL
    config, planner = robot_planner(model, None, (), 1.0 / CONTROL_PERIOD_S)
    seed = args.seed or ROBOT_DEMO_SEED
    env = ManipulationEnv(args.task, 64, tuple(config.camera_names))
    print(f"{args.task} (seed {seed}): {model} in closed loop, at most {args.max_steps} steps …")
    clock = VirtualClock(START_NS)
    runtime = RobotRuntime(config, planner, clock, timing="ideal")
    try:
        act = model_actor(runtime, clock, env.instruction, {})
        result = run_episode(env, "model", seed, act, args.max_steps, 4, record=True)
    finally:
        runtime.close()
        env.close()
    bag = out / "episode.mcap"
    write_demo_bag(
        result.extra["demonstration"],
        bag,
        START_NS,
        {"policy": "model", "model": model, "render_every": 4},
    )
    print(
        f"{'success' if result.success else 'no success'} after {result.steps} steps; "
        f"replaying {bag} …"
    )
    replayed = replay_robot_bag(bag, planner, config)
    paths = write_robot_report(
        replayed,
        out,
        {"model": model, "closed_loop": {"success": result.success, "steps": result.steps}},
    )
    print(f"open {paths['report']} in a browser; the run is {bag}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.embodiment == "robot":
        return run_robot(args)
    from blockplan.commands.replay import interrupted_line, print_summary

    out = Path(args.out or DEMO_OUT)
    bag = out / "sim.mcap"
    if out.is_dir() and any(out.iterdir()):
        others = sorted(p.name for p in out.iterdir() if p.name not in DEMO_FILES)
        if others:
            print(
                f"error: {out} holds files a demo did not write ({', '.join(others)}); "
                "pass another --out",
                file=sys.stderr,
            )
            return 1
        print(f"replacing the previous demo in {out}")
        for name in DEMO_FILES:
            (out / name).unlink(missing_ok=True)
    config = load_config(args.params or default_params_path())
    model = args.model or default_model(config)
    config = config.with_params({"model.dir": model})
    planner = load_planner(model, config)
    print(f"simulating {args.duration:g} s of {args.scenario} (seed {args.seed}) …")
    simulate(args, bag)
    print(f"replaying {bag} with {model} ({args.timing} timing) …")
    with tqdm(total=0, unit="msg", desc="replay", file=sys.stderr) as bar:

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        try:
            outputs = run_replay(
                bag,
                out,
                planner,
                config,
                timing=args.timing,
                progress=progress,
                extra_metrics={"model": model},
            )
        except ReplayInterrupted as stop:
            bar.close()
            print(interrupted_line(stop), file=sys.stderr)
            return EXIT_INTERRUPTED
    print_summary(outputs)
    print(f"\nopen {outputs.report_html} in a browser; play {outputs.plans_bag} in Foxglove / RViz")
    return 0
