"""`blockplan replay`: run the planner over a ROS 2 bag exactly as on the vehicle."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tqdm import tqdm

from blockplan.bags import BagError
from blockplan.config import (
    ConfigError,
    add_set_argument,
    default_params_path,
    load_config,
)
from blockplan.replay import ReplayInputError, ReplayOutputs, load_planner, run_replay
from blockplan.replay.requests import RequestsFileError, read_request_windows

HELP = "replay a ROS 2 bag through the control loop: plans.mcap, metrics.json, report.html"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="input bag: a rosbag2 folder, or an .mcap / .db3 file")
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


def print_summary(outputs: ReplayOutputs, file=None) -> None:
    m = outputs.metrics
    lines = [
        "",
        f"replay of {m['bag']}  ({m['timing']} timing, {m['rate_hz']:g} Hz)",
        f"  ticks {m['ticks']}   plans {m['plans']}   fallbacks {m['fallbacks']}   "
        f"deadline misses {m['deadline_misses']}   invalid inputs {m['invalid_inputs']}",
        f"  inference latency p50 {m['latency_ms']['p50']} ms   p99 {m['latency_ms']['p99']} ms"
        f"   tick p50 {m['tick_ms']['p50']} ms   p99 {m['tick_ms']['p99']} ms",
    ]
    if "ade_5s" in m:
        lines.append(
            f"  vs recorded path ({m['evaluated_plans']} plans): ADE@3s {m['ade_3s']} m   "
            f"ADE@5s {m['ade_5s']} m   L2@1/2/3s {m['l2_1s']} / {m['l2_2s']} / {m['l2_3s']} m"
        )
    else:
        lines.append("  no recorded future path long enough for displacement metrics")
    counters = m["counters"]
    if counters.get("invalid_plans") or counters.get("planner_errors"):
        lines.append(
            f"  rejected plans: {counters.get('invalid_plans', 0)} failed the validity gates, "
            f"{counters.get('planner_errors', 0)} planner errors (the fallback was published; "
            "each reason is on /diagnostics; -v logs them)"
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
            line += (
                f"; streaming: {prefill['streamed_ticks']} streamed, {prefill['full_prefills']}"
                f" full prefills {prefill['full_prefill_reasons']}, frames reused "
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
    try:
        config = load_config(args.params or default_params_path(), overrides=args.set)
        planner = load_planner(args.model or config.model.dir, config)
        request_windows = read_request_windows(args.requests) if args.requests else None
    except (ConfigError, ReplayInputError, RequestsFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    bar = tqdm(total=0, unit="msg", desc="replay", disable=args.no_progress, file=sys.stderr)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        outputs = run_replay(
            Path(args.bag),
            Path(args.out),
            planner,
            config,
            timing=args.timing or config.control.timing,
            rate_hz=args.rate,
            progress=progress,
            extra_metrics={"model": args.model or config.model.dir},
            request_windows=request_windows,
        )
    except (BagError, ReplayInputError, ConfigError) as e:
        bar.close()
        print(f"error: {e}", file=sys.stderr)
        return 1
    bar.close()
    print_summary(outputs)
    return 0
