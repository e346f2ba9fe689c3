"""`blockplan play`: publish a ROS 2 bag into a live graph (rclpy + rosbags), where rosbag2's
`ros2 bag play` is not installed; optionally observe the planner's outputs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _silence(text: str) -> tuple[str, float]:
    topic, sep, seconds = text.rpartition("@")
    try:
        if not sep or not topic:
            raise ValueError
        return topic, float(seconds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected TOPIC@SECONDS") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="a rosbag2 folder, or an .mcap / .db3 file")
    parser.add_argument("-r", "--rate", type=float, default=1.0, help="playback rate (1.0)")
    parser.add_argument(
        "--clock",
        type=float,
        nargs="?",
        const=40.0,
        metavar="HZ",
        help="publish /clock from the bag's time at HZ (default 40) and before every "
        "message, for nodes with use_sim_time:=true (as `ros2 bag play --clock`)",
    )
    parser.add_argument(
        "--restamp",
        action="store_true",
        help="shift every stamp onto the wall clock (the first message stamped now), for "
        "nodes on wall time; excludes --clock",
    )
    parser.add_argument("--topics", nargs="+", default=[], help="play only these topics")
    parser.add_argument("--exclude-topics", nargs="+", default=[], help="do not play these")
    parser.add_argument(
        "--start-offset", type=float, default=0.0, metavar="S", help="skip the first S seconds"
    )
    parser.add_argument(
        "--playback-duration", type=float, metavar="S", help="play at most S seconds of the bag"
    )
    parser.add_argument(
        "--delay", type=float, default=0.0, metavar="S", help="wait S seconds before playing"
    )
    parser.add_argument(
        "--silence",
        type=_silence,
        action="append",
        default=[],
        metavar="TOPIC@S",
        help="stop publishing TOPIC after S seconds of the bag (fault injection; repeatable)",
    )
    parser.add_argument(
        "--wait-for",
        nargs="+",
        default=[],
        metavar="TOPIC",
        help="before playing, wait until each TOPIC has a subscriber",
    )
    parser.add_argument(
        "--wait-timeout", type=float, default=10.0, metavar="S", help="for --wait-for (10)"
    )
    parser.add_argument(
        "--observe",
        metavar="DIR",
        help="also record the planner's outputs: DIR/observed.json (rates, periods, "
        "end-to-end latency, node CPU, every message) and DIR/reasoning.jsonl (for "
        "`blockplan replay --requests`)",
    )
    parser.add_argument(
        "--observe-namespace", default="", help="the planner's namespace (e.g. car1)"
    )
    parser.add_argument(
        "--linger",
        type=float,
        default=1.0,
        metavar="S",
        help="with --observe: keep observing S seconds after the bag ends (1.0)",
    )


def run(args: argparse.Namespace) -> int:
    if not Path(args.bag).exists():  # the user's mistake first, before the environment's
        print(f"error: {args.bag}: no such bag", file=sys.stderr)
        return 1
    try:
        from blockplan.ros.player import PlayOptions, run_player
    except ImportError as e:
        print(
            f"error: blockplan play needs ROS 2 (rclpy): {e}. Source the ROS 2 setup "
            "(e.g. `source /opt/ros/jazzy/setup.bash`) in this shell first.",
            file=sys.stderr,
        )
        return 1
    from blockplan.bags import BagError

    try:
        options = PlayOptions(
            rate=args.rate,
            clock_hz=args.clock,
            topics=tuple(args.topics),
            exclude_topics=tuple(args.exclude_topics),
            start_offset_s=args.start_offset,
            duration_s=args.playback_duration,
            delay_s=args.delay,
            restamp=args.restamp,
            silence=dict(args.silence),
            wait_for=tuple(args.wait_for),
            wait_timeout_s=args.wait_timeout,
        )
        result = run_player(
            Path(args.bag),
            options,
            observe_dir=args.observe,
            observe_namespace=args.observe_namespace,
            linger_s=args.linger,
        )
    except (BagError, ValueError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    total = sum(result.published.values())
    state = "interrupted after" if result.interrupted else "played"
    print(
        f"{state} {result.bag_seconds:.2f} s of {args.bag} in {result.wall_seconds:.2f} s: "
        f"{total} messages on {len(result.published)} topics",
        file=sys.stderr,
    )
    for topic, msgtype in sorted(result.skipped_types.items()):
        print(f"  skipped {topic}: type {msgtype} is not installed", file=sys.stderr)
    if args.observe:
        summary = json.loads((Path(args.observe) / "observed.json").read_text())["summary"]
        print(json.dumps(summary, indent=2))
    return 0
