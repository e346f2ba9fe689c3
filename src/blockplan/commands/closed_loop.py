"""`blockplan closed-loop`: the planner drives the ego in highway-env; the model, the IDM
expert and the constant-velocity baseline on the same seeds, and on request the ego-status
MLPs fitted on `--data` (`ego_mlp`, `ego_mlp_lane_pose`, which also reads the lane pose,
``ego_mlp_lead`, which reads the lane pose and the car ahead, `ego_mlp_beside`, which also
reads the lanes beside, and `ego_mlp_route`, which also reads the route ahead).
With `--embodiment robot`: the robot policy on a Meta-World task through `RobotRuntime`, next
to the scripted expert and the blind (proprioception-only) baseline (closedloop/robot.py)."""

from __future__ import annotations

import argparse
import sys
import time

from blockplan.commands.outputs import write_json_file
from blockplan.config import add_set_argument

# fitted on --data
MLP_POLICIES = ("ego_mlp", "ego_mlp_lane_pose", "ego_mlp_lead", "ego_mlp_beside", "ego_mlp_route")
POLICIES = ("model", "expert", "constant_velocity", *MLP_POLICIES)
DEFAULT_POLICIES = ("model", "expert", "constant_velocity")
ROBOT_POLICIES = ("model", "expert", "blind")
DEFAULT_ROBOT_MODEL = "models/blockplan-robot-tiny"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.sim.scenarios import SCENARIOS

    parser.add_argument(
        "--embodiment",
        default="vehicle",
        choices=["vehicle", "robot"],
        help="vehicle: highway-env; robot: Meta-World (--task)",
    )
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
        "--hide-inputs",
        nargs="+",
        default=[],
        metavar="INPUT",
        help="optional inputs the planner is not given, as on a vehicle without them: "
        "lane-pose, lead, beside, route; perception (the first three: the cameras, the ego "
        "history and the route remain), or all (the cameras and the ego history remain)",
    )
    parser.add_argument(
        "--policies",
        nargs="+",
        choices=sorted({*POLICIES, *ROBOT_POLICIES}),
        help="which policies to run (default: model expert constant_velocity; robot: model "
        "expert blind); ego_mlp: the ego-status MLP fitted on --data; ego_mlp_lane_pose: "
        "the same MLP with the lane pose as an input too; ego_mlp_lead: with the lane pose "
        "and the car ahead (gap, speed); ego_mlp_beside: and the lanes beside; ego_mlp_route: "
        "and the route ahead",
    )
    parser.add_argument(
        "--data",
        help="the data set a baseline is fitted on (its train split): "
        "a `blockplan dataset` folder for the ego_mlp policies, a robot data set "
        "for the blind one; required for those",
    )
    robot = parser.add_argument_group("robot (--embodiment robot)")
    robot.add_argument(
        "--task",
        default="reach",
        help="Meta-World task: one of the MT10 ten (reach push pick-place door-open drawer-open "
        "drawer-close button-press-topdown peg-insert-side window-open window-close)",
    )
    robot.add_argument("--max-steps", type=int, default=150, help="control steps per episode")
    robot.add_argument(
        "--render-every",
        type=int,
        default=4,
        help="render the cameras every k-th control step (4: 20 Hz)",
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


def _ego_mlps(data: str, model: str, config, names: list[str]) -> dict:
    """The ego-status MLPs `names` (`ego_mlp_lane_pose` also reads the lane pose,
    `ego_mlp_lead` the lane pose and the car ahead, `ego_mlp_beside` the lanes beside as
    well, `ego_mlp_route` the route ahead too) fitted on
    `data`'s train split, loaded once, with the history rows of `model`'s recipe where it is
    a folder (as `blockplan eval` fits them), else the default schema's."""
    from blockplan.planner.loading import ModelLoadError, resolve_model_dir
    from blockplan.train.baselines import EgoMLPPlanner
    from blockplan.train.evaluate import recipe_of_folder
    from blockplan.train.examples import load_shards
    from blockplan.train.recipe import Recipe

    try:
        recipe = recipe_of_folder(resolve_model_dir(model, "--model"))
    except ModelLoadError:  # a baseline or random-init: the schema the data set records
        recipe = Recipe.build("tiny", tuple(config.camera_names), config.frame_window.num_frames)
    train = load_shards(data, "train", recipe, with_images=False)
    return {
        name: EgoMLPPlanner.fit_examples(
            train,
            recipe.schema,
            lane_pose=name != "ego_mlp",
            lead=name in ("ego_mlp_lead", "ego_mlp_beside", "ego_mlp_route"),
            beside=name in ("ego_mlp_beside", "ego_mlp_route"),
            route=name == "ego_mlp_route",
        )
        for name in names
    }


def run(args: argparse.Namespace) -> int:
    if args.embodiment == "robot":
        return run_robot(args)
    args.policies = args.policies or list(DEFAULT_POLICIES)
    bad = [p for p in args.policies if p not in POLICIES]
    if bad:
        print(
            f"error: --policies {bad[0]}: a vehicle policy is one of {list(POLICIES)}",
            file=sys.stderr,
        )
        return 2
    mlps = [p for p in args.policies if p in MLP_POLICIES]
    if mlps and not args.data:
        print(
            f"error: the {mlps[0]} policy is fitted on --data (a `blockplan dataset` folder)",
            file=sys.stderr,
        )
        return 2
    from tqdm import tqdm

    from blockplan.closedloop import EpisodeSpec, run_evaluation
    from blockplan.closedloop.episode import HIDEABLE_INPUTS, PERCEPTION_INPUTS
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
        if mlps:
            planners.update(_ego_mlps(args.data, model, config, mlps))
        rig = load_rig(args.rig)
        scenario = get_scenario(args.scenario)
        hide = args.hide_inputs
        aliases = {"all": HIDEABLE_INPUTS, "perception": PERCEPTION_INPUTS}
        hidden = frozenset(name for h in hide for name in aliases.get(h, (h,)))
        specs = [
            EpisodeSpec(
                scenario, args.seed + k, args.duration, args.control_hz, args.replan_period, hidden
            )
            for k in range(args.episodes)
        ]
    except (ConfigError, ModelLoadError, ScenarioError, ValueError, OSError) as e:
        print(f"error: {_flag_names(str(e))}", file=sys.stderr)
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
        "ego_mlp_data": args.data if mlps else None,
        "decoding": config.decoding.strategy,
        "duration_s": args.duration,
        "replan_period_s": args.replan_period,
        "control_hz": args.control_hz,
        "hidden_inputs": sorted(hidden),
        "wall_s": round(time.perf_counter() - start, 1),
        "frames": [str(p) for p in evaluation.frames],
    }
    doc["episodes"] = evaluation.episodes()
    write_json_file(args.json, doc)
    for policy in args.policies:
        m = doc[policy]
        if m["episodes"]:
            print(
                f"{policy:>18}: collisions {m['collision_rate']:.2f}  progress "
                f"{m['progress_m']:.1f} m  lane departures {m['lane_departure_rate']:.2f}  "
                f"|jerk| {m['mean_abs_jerk']:.3f} m/s^3  lane offset mean "
                f"{m['mean_abs_lane_offset_m']:.2f} / max {m['max_abs_lane_offset_m']:.2f} m  "
                + (
                    f"no progress {m['no_progress_rate']:.2f}  failed {m['failure_rate']:.2f}  "
                    if m["failure_rate"] is not None
                    else ""
                )
                + f"({m['episodes']} episodes)"
            )
    print(f"wrote {args.json}")
    return 0


SPEC_FLAGS = {  # EpisodeSpec's fields as the command line names them
    "EpisodeSpec.duration_s": "--duration",
    "EpisodeSpec.control_hz": "--control-hz",
    "EpisodeSpec.replan_period_s": "--replan-period",
    "EpisodeSpec.hidden_inputs": "--hide-inputs",
}


def _flag_names(message: str) -> str:
    for field_name, flag in SPEC_FLAGS.items():
        message = message.replace(field_name, flag)
    return message


def robot_planner(model: str, params: str | None, overrides, control_hz: float | None = None):
    """(config, planner) of a robot model folder with params/robot.yaml (or `params`)."""
    from blockplan.config import load_config, package_root
    from blockplan.planner.embodiment import robot_config
    from blockplan.planner.loading import load_model

    config = load_config(params or package_root() / "params" / "robot.yaml", overrides=overrides)
    if control_hz is not None:
        config = config.with_params({"control.rate_hz": control_hz})
    planner = load_model(model, config, where="--model", require_manifest=False)
    mc = planner.model.config
    config = robot_config(config, mc.camera_names, mc.num_frames)
    return config, planner


def run_robot(args: argparse.Namespace) -> int:
    from blockplan.closedloop.robot import BlindPolicy, blind_actor, evaluate_robot
    from blockplan.config import ConfigError
    from blockplan.planner.loading import ModelLoadError
    from blockplan.sim.manipulation import CONTROL_PERIOD_S, task_spec

    policies = args.policies or list(ROBOT_POLICIES)
    bad = [p for p in policies if p not in ROBOT_POLICIES]
    if bad or args.episodes < 1 or args.max_steps < 1:
        why = (
            f"--policies {bad[0]}: a robot policy is one of {list(ROBOT_POLICIES)}"
            if bad
            else ("--episodes and --max-steps must be >= 1")
        )
        print(f"error: {why}", file=sys.stderr)
        return 2
    if "blind" in policies and not args.data:
        print("error: the blind baseline trains on --data (a robot data set)", file=sys.stderr)
        return 2
    task_spec(args.task)
    model = args.model or DEFAULT_ROBOT_MODEL
    start = time.perf_counter()
    try:
        config, planner = robot_planner(model, args.params, args.set, 1.0 / CONTROL_PERIOD_S)
    except (ConfigError, ModelLoadError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    blind = None
    if "blind" in policies:
        blind = BlindPolicy.fit(args.data, planner.schema.horizon, seed=0)
        blind_actor(blind, task_spec(args.task).instruction, 1)  # its task is in --data
    seeds = [args.seed + k for k in range(args.episodes)]
    progress = None if args.no_progress else (lambda line: print(line, file=sys.stderr))
    doc = evaluate_robot(
        args.task,
        seeds,
        policies,
        planner,
        config,
        blind,
        args.max_steps,
        args.render_every,
        progress=progress,
    )
    doc["run"] = {
        "embodiment": "robot",
        "model": model,
        "weights": getattr(planner, "weights", None),
        "decoding": config.decoding.strategy,
        "replan_steps": config.robot.replan_steps,
        "blind_data": args.data,
        "blind_train_loss": getattr(blind, "train_loss", None),
        "wall_s": round(time.perf_counter() - start, 1),
    }
    write_json_file(args.json, doc)
    for policy in policies:
        m = doc[policy]
        print(
            f"{policy:>8}: success {m['success_rate']:.2f}  mean steps {m['mean_steps']:.1f}  "
            f"({m['episodes']} episodes, {args.task})"
        )
    print(f"wrote {args.json}")
    return 0
