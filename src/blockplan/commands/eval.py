"""`blockplan eval`: open-loop metrics of a model folder on a data set's test split, next to
the constant-velocity and ego-status-MLP baselines fitted on the same data set."""

from __future__ import annotations

import argparse
import sys

from blockplan.commands.outputs import write_json_file
from blockplan.config import add_set_argument


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="a `blockplan dataset` folder")
    parser.add_argument("--model", required=True, help="a planner model folder")
    parser.add_argument("--json", required=True, help="where to write the metrics JSON")
    parser.add_argument("--split", default="test", help="split to evaluate (test)")
    parser.add_argument(
        "--max-samples", type=int, help="evaluate this many evenly spaced samples (default: all)"
    )
    parser.add_argument("--rollouts", type=int, default=4, help="N of the rollouts run (4)")
    parser.add_argument(
        "--no-collisions",
        action="store_true",
        help="skip the re-simulation behind the collision rate",
    )
    parser.add_argument(
        "--mlp-seeds",
        type=int,
        default=1,
        help="also fit the ego-status MLP with this many seeds and report the spread of its "
        "ADE@5s (1: seed 0 only; each fit takes minutes on a large data set)",
    )
    parser.add_argument("--num-threads", type=int, default=1, help="torch CPU threads (1)")
    add_set_argument(parser)  # planner parameters of the model rows, e.g. rollouts.temperature


def run(args: argparse.Namespace) -> int:
    import torch

    from blockplan.config import ConfigError, PlannerConfig, with_overrides
    from blockplan.train.evaluate import evaluate, summary_lines
    from blockplan.train.examples import DataError

    checked = (
        ("--max-samples", args.max_samples),
        ("--rollouts", args.rollouts),
        ("--mlp-seeds", args.mlp_seeds),
    )
    for flag, value in checked:
        if value is not None and value < 1:
            print(f"error: {flag}={value} must be >= 1", file=sys.stderr)
            return 2
    torch.set_num_threads(args.num_threads)
    try:
        with_overrides(PlannerConfig(), args.set)  # a bad --set fails before the data loads
        results = evaluate(
            args.data,
            args.model,
            args.split,
            args.max_samples,
            args.rollouts,
            check_collisions=not args.no_collisions,
            overrides=args.set,
            mlp_seeds=args.mlp_seeds,
        )
    except (ConfigError, DataError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_json_file(args.json, results)
    print("\n".join(summary_lines(results)))
    print(f"metrics: {args.json}")
    return 0
