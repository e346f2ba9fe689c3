"""`blockplan replay`: run the planner over a ROS 2 bag exactly as on the vehicle."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from tqdm import tqdm

from blockplan.cli import EXIT_INTERRUPTED
from blockplan.config import (
    ConfigError,
    PlannerConfig,
    add_set_argument,
    default_params_path,
    load_config,
)
from blockplan.errors import UserError
from blockplan.replay import (
    ReplayInterrupted,
    ReplayOutputs,
    check_bag,
    load_planner,
    no_empty_folders_left,
    prepare_output_dir,
    run_replay,
)
from blockplan.replay.batch import bag_row, output_folders, summary_lines, write_summary
from blockplan.replay.requests import read_request_windows
from blockplan.replay.topics import ReplayInputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "bag",
        nargs="+",
        help="input bag: a rosbag2 folder, or an .mcap / .db3 file; several bags replay one "
        "after the other into OUT/<bag name> with OUT/summary.json over all",
    )
    parser.add_argument(
        "--model",
        help="model folder, random-init[:PRESET] (random weights), or constant-velocity "
        "(the baseline) (default: model.dir "
        "of the params file)",
    )
    parser.add_argument(
        "--out", required=True, help="output folder (created; must not hold a plans.mcap already)"
    )
    parser.add_argument(
        "--timing",
        choices=("ideal", "measured"),
        help="ideal: a plan is ready at the tick that asked for it (model quality); measured: "
        "one measured inference latency later (default: control.timing of the params file)",
    )
    parser.add_argument("--rate", type=float, help="control rate in Hz (default: control.rate_hz)")
    parser.add_argument("--params", help="ROS 2 params YAML (default: the shipped planner.yaml)")
    add_set_argument(parser)
    parser.add_argument(
        "--requests",
        metavar="FILE",
        help="plan only the windows a live run planned for, with the same frames: its "
        "reasoning records (reasoning.jsonl of `blockplan play --observe`, or a bag with "
        "/planning/reasoning); with --timing ideal each replayed plan matches a live one",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--embodiment",
        default="vehicle",
        choices=["vehicle", "robot"],
        help="robot: a robot bag (blockplan robot-demos, demo --embodiment "
        "robot) through RobotRuntime: metrics.json, actions.png, report.html",
    )


def run_robot(args: argparse.Namespace) -> int:
    """Open-loop replay of a robot bag with a robot model (params/robot.yaml)."""
    from blockplan.commands.closed_loop import DEFAULT_ROBOT_MODEL, robot_planner
    from blockplan.replay.robot import replay_robot_bag, write_robot_report

    model = args.model or DEFAULT_ROBOT_MODEL
    config, planner = robot_planner(model, args.params, args.set, args.rate or 80.0)
    result = replay_robot_bag(args.bag, planner, config, args.timing or "ideal")
    paths = write_robot_report(result, args.out, {"model": model, "weights": planner.weights})
    m = result["metrics"]
    mae = "  ".join(f"{k} {v:.3f}" for k, v in m["action_mae"].items() if v is not None)
    print(
        f"replay of {args.bag}: {m['steps']} steps, {m['chunks']} chunks, "
        f"{m['held_fraction']:.0%} held; action MAE vs recorded: {mae or 'n/a'}"
    )
    print(f"report: {paths['report']}")
    return 0


def _ms(stats: dict) -> str:
    """p50 / p99 of a latency window, or n/a when it holds no sample."""
    if stats.get("p50") is None:
        return "n/a"
    return f"p50 {stats['p50']} ms   p99 {stats['p99']} ms"


def print_summary(outputs: ReplayOutputs, file=None) -> None:
    m = outputs.metrics
    lines = [
        "",
        f"replay of {m['bag']}  ({m['timing']} timing, {m['rate_hz']:g} Hz)",
        f"  model {m.get('model', '?')}   weights {m.get('weights', '?')}",
        f"  ticks {m['ticks']}   plans {m['plans']}   fallbacks {m['fallbacks']}   "
        f"deadline misses {m['deadline_misses']}   invalid inputs {m['invalid_inputs']}",
        f"  inference latency {_ms(m['latency_ms'])}   tick {_ms(m['tick_ms'])}",
    ]
    if m.get("no_ticks"):
        lines.append(f"  no control tick ran: {m['no_ticks']}")
    unscored = m.get("unscored_plans") or {}
    why = "; ".join(f"{n} {reason}" for reason, n in sorted(unscored.items(), key=lambda x: -x[1]))
    if "ade_5s" in m:
        lines.append(
            f"  vs recorded path ({m['evaluated_plans']} of {m['plans']} plans): "
            f"ADE@3s {m['ade_3s']} m   ADE@5s {m['ade_5s']} m   "
            f"L2@1/2/3s {m['l2_1s']} / {m['l2_2s']} / {m['l2_3s']} m"
        )
        if "along_track_5s" in m:
            bias = m["along_track_bias_5s"]
            lines.append(
                f"  error along / across the recorded path {m['along_track_5s']} / "
                f"{m['cross_track_5s']} m (speed / path); at 5 s the plans are "
                f"{abs(bias):.2f} m {'ahead of' if bias >= 0 else 'behind'} it on average"
            )
        if why:
            lines.append(f"  plans not scored (no recorded future to 5 s): {why}")
    elif m["plans"]:
        lines.append(f"  no plan has a recorded future to 5 s to score against: {why}")
    counters = m["counters"]
    rejected, errors = counters.get("invalid_plans", 0), counters.get("planner_errors", 0)
    if rejected or errors:
        lines.append(
            f"  rejected plans: {rejected} failed the validity gates, {errors} planner errors "
            "(never published: a tick publishes the newest accepted plan while it is younger "
            "than control.max_plan_age_s, else the fallback; reasons on /diagnostics, -v "
            "logs them)"
        )
    if counters.get("unfinished_plans"):
        lines.append("  a plan was still being computed when the bag ended (latency counted)")
    st = m.get("streaming") or {}
    prefill = (st.get("planner") or {}).get("prefill")
    if st.get("window_frames_shared") is not None and st.get("window_shared_fraction") is not None:
        line = (
            f"  windows: {st['window_frames_shared']} frames shared with earlier requests, "
            f"{st['window_frames_new']} new"
        )
        if prefill:
            reasons = ", ".join(f"{k} {v}" for k, v in prefill["full_prefill_reasons"].items())
            line += (
                f"; streaming: {prefill['streamed_ticks']} streamed, {prefill['full_prefills']}"
                f" full prefills ({reasons or 'none'}), frames reused "
                f"{prefill['frames_reused']} / computed {prefill['frames_computed']}"
            )
        lines.append(line)
    if m.get("requests"):
        r = m["requests"]
        lines.append(
            f"  requests: followed {r['requested']} of the {r['given']} given windows"
            + (f" ({len(r['not_requested_ns'])} not in this bag)" if r["not_requested_ns"] else "")
        )
    if m.get("missing_camera_topics"):
        lines.append(f"  missing camera topics: {', '.join(m['missing_camera_topics'])}")
    lines += [
        f"  plans bag   {outputs.plans_bag}",
        f"  metrics     {outputs.metrics_json}",
        f"  report      {outputs.report_html}",
    ]
    print("\n".join(lines), file=file or sys.stdout)


def run(args: argparse.Namespace) -> int:
    bags = [args.bag] if isinstance(args.bag, str) else list(args.bag)
    if len(bags) > 1:
        return run_many(args, bags)
    args.bag = bags[0]
    if args.embodiment == "robot":
        return run_robot(args)
    # The cheap checks first (options, params, output folder, bag), then the model (seconds).
    config = replay_config(args)
    out = Path(args.out)
    try:
        with no_empty_folders_left(out):
            prepare_output_dir(out)
            check_bag(Path(args.bag), config)
            model = args.model or config.model.dir
            request_windows = read_request_windows(args.requests) if args.requests else None
            planner = load_planner(model, config)
            outputs = _replay_one(
                args, Path(args.bag), out, planner, config, model, request_windows
            )
    except ReplayInterrupted as stop:
        print(interrupted_line(stop), file=sys.stderr)
        return EXIT_INTERRUPTED
    print_summary(outputs)
    if outputs.metrics.get("no_ticks"):
        print(f"error: no control tick ran: {outputs.metrics['no_ticks']}", file=sys.stderr)
        return 1
    return 0


def _replay_one(args, bag: Path, out: Path, planner, config, model, request_windows=None):
    bar = tqdm(
        total=0, unit="msg", desc=f"replay {bag.name}", disable=args.no_progress, file=sys.stderr
    )

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        return run_replay(
            bag,
            out,
            planner,
            config,
            timing=config.control.timing,
            progress=progress,
            extra_metrics={"model": model},
            request_windows=request_windows,
        )
    finally:
        bar.close()


def run_many(args: argparse.Namespace, bags: list[str]) -> int:
    """Several bags: each into OUT/<name> as if replayed alone (the planner loaded once and
    reset between bags), then OUT/summary.json. A bag that fails mid-way is reported and the
    others still run; the exit status is 1 if any failed."""
    if args.embodiment == "robot":
        raise ReplayInputError("--embodiment robot replays one bag at a time")
    if args.requests:
        raise ReplayInputError("--requests belongs to one bag: replay that bag alone")
    config = replay_config(args)
    out = Path(args.out)
    folders = output_folders(bags, out)
    for bag in bags:  # every cheap check before the model, and before any folder is made
        check_bag(Path(bag), config)
    model = args.model or config.model.dir
    with no_empty_folders_left(*folders):
        for folder in folders:
            prepare_output_dir(folder)
        planner = load_planner(model, config)
    rows: list[dict] = []
    extra = {"model": model, "timing": config.control.timing, "rate_hz": config.control.rate_hz}
    for i, (bag, folder) in enumerate(zip(bags, folders, strict=True)):
        if i and hasattr(planner, "reset"):
            planner.reset()  # no stream or counters carried from the bag before
        try:
            outputs = _replay_one(args, Path(bag), folder, planner, config, model)
        except ReplayInterrupted as stop:
            print(interrupted_line(stop), file=sys.stderr)
            write_summary(out, rows, extra | {"interrupted_in": str(bag)})
            return EXIT_INTERRUPTED
        except UserError as e:
            print(f"error: {bag}: {e}", file=sys.stderr)
            rows.append(bag_row(bag, folder, None, str(e)))
            continue
        print_summary(outputs)
        no_ticks = outputs.metrics.get("no_ticks")
        rows.append(
            bag_row(
                bag,
                folder,
                outputs.metrics,
                f"no control tick ran: {no_ticks}" if no_ticks else None,
            )
        )
    path = write_summary(out, rows, extra)
    print("\n".join(summary_lines(rows, path)))
    return 1 if any("error" in r for r in rows) else 0


def replay_config(args: argparse.Namespace) -> PlannerConfig:
    """The params file with `--set`, `--rate`, `--timing` and `--model` applied (validated:
    `--rate 0` is an error, not the default rate)."""
    config = load_config(args.params or default_params_path(), overrides=args.set)
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        raise ConfigError(f"--rate {args.rate:g}: must be a control rate in Hz > 0")
    # The model replayed is what the report and /diagnostics name.
    options = {"control.rate_hz": args.rate, "control.timing": args.timing, "model.dir": args.model}
    return config.with_params({k: v for k, v in options.items() if v is not None})


def interrupted_line(stop: ReplayInterrupted) -> str:
    """The one line Ctrl-C prints: how far the replay got and where its outputs are."""
    m = stop.result.metrics
    where = stop.outputs.metrics_json.parent if stop.outputs is not None else "nowhere"
    return (
        f"interrupted after {m.get('interrupted_after_s', 0.0):g} s of the bag "
        f"({m['ticks']} ticks, {m['plans']} plans): the outputs in {where} cover those "
        "ticks and say interrupted"
    )
