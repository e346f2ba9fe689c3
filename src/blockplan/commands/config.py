"""`blockplan config`: validate a params file and print the resolved configuration."""

from __future__ import annotations

import argparse
import json
import sys

from blockplan.config import (
    DEFAULT_NODE_NAME,
    ConfigError,
    config_to_params,
    default_params_path,
    dump_config,
    load_config,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--params", help="ROS 2 params YAML file (default: the shipped params/planner.yaml)"
    )
    parser.add_argument("--node", help="node name inside the params file (default: its only node)")
    parser.add_argument(
        "--json", action="store_true", help="print JSON instead of a params YAML document"
    )


def run(args: argparse.Namespace) -> int:
    path = args.params or default_params_path()
    try:
        config = load_config(path, args.node)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(config_to_params(config), indent=2))
    else:
        print(dump_config(config, args.node or DEFAULT_NODE_NAME), end="")
    return 0
