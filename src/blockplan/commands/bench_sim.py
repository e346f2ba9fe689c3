"""`blockplan bench-sim`: simulation steps/s per scenario and render ms per camera, as JSON."""

from __future__ import annotations

import argparse
import sys

from blockplan.commands.outputs import print_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from blockplan.sim.scenarios import SCENARIOS

    parser.add_argument("--seconds", type=float, default=10.0, help="simulated seconds (10)")
    parser.add_argument("--frames", type=int, default=50, help="camera ticks rendered (50)")
    parser.add_argument(
        "--scenario",
        nargs="+",
        default=sorted(SCENARIOS),
        choices=sorted(SCENARIOS),
        help="scenarios (default: all)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the report to this file")


def run(args: argparse.Namespace) -> int:
    from blockplan.bench.sim import sim_report

    if args.seconds <= 0 or args.frames < 1:
        print("error: --seconds must be > 0 and --frames >= 1", file=sys.stderr)
        return 2
    print_report(sim_report(args.scenario, args.seconds, args.frames), args.json)
    return 0
