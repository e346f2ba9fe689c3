"""Params files: `load_config` (with the CLIs' `--set NAME=VALUE` overrides), `dump_config`,
and where the shipped `params/planner.yaml` lives.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from blockplan.config.planner import PlannerConfig, config_from_params, config_to_params
from blockplan.errors import ConfigError
from blockplan.params_file import (
    PLANNER_NODE_NAME,
    flatten_params,
    load_yaml,
    read_params_file,
    unflatten_params,
)

DEFAULT_NODE_NAME = PLANNER_NODE_NAME


def load_config(
    path: str | Path, node_name: str | None = None, overrides: Sequence[str] = ()
) -> PlannerConfig:
    """Load and validate the planner configuration from a ROS 2 params YAML file, with
    `NAME=VALUE` overrides (dotted name, YAML value; the CLIs' `--set`) applied first."""
    params = read_params_file(path, node_name)
    try:
        if overrides:
            flat = flatten_params(params)
            flat.update(parse_override(item) for item in overrides)
            params = unflatten_params(flat)
        return config_from_params(params)
    except ConfigError as e:
        if str(e).startswith("--set "):
            raise  # parse_override's own error names its item
        culprit = _override_at_fault(overrides, str(e))
        if culprit is not None:
            raise ConfigError(f"--set {culprit!r}: {e}") from e
        raise ConfigError(f"{path}: {e}") from e


def parse_override(item: str) -> tuple[str, Any]:
    """One `--set NAME=VALUE`: the dotted name and its YAML value."""
    name, sep, text = item.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--set {item!r}: expected NAME=VALUE")
    try:
        value = load_yaml(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {item!r}: {e}") from e
    if isinstance(value, bool) and text.strip().lower() not in ("true", "false"):
        value = text.strip()  # YAML 1.1 reads on / off / yes / no as booleans
    return name.strip(), value


def with_overrides(config: PlannerConfig, overrides: Sequence[str]) -> PlannerConfig:
    """`config` with the CLIs' `--set NAME=VALUE` overrides applied, validated as in
    `load_config` (a bad one is a ConfigError naming it)."""
    if not overrides:
        return config
    try:
        return config.with_params(dict(parse_override(item) for item in overrides))
    except ConfigError as e:
        culprit = _override_at_fault(overrides, str(e))
        raise ConfigError(f"--set {culprit!r}: {e}" if culprit else str(e)) from e


def _override_at_fault(overrides: Sequence[str], message: str) -> str | None:
    """The `--set NAME=VALUE` whose NAME the error names (the longest one), or None: the
    error is the params file's. An error may name the override's parameter, a section of it
    (`--set a.b=1` where there is no section `a`) or a parameter under it."""
    head = message.split(" (known:")[0]  # the list of known names names no culprit
    quoted = re.findall(r"'([^']+)'", head)

    def at_fault(name: str) -> bool:
        if f"{name}=" in head:
            return True
        return any(
            q == name or name.startswith(f"{q}.") or q.startswith(f"{name}.") for q in quoted
        )

    named = [
        item for item in overrides if (name := item.partition("=")[0].strip()) and at_fault(name)
    ]
    return max(named, key=lambda item: len(item.partition("=")[0]), default=None)


def add_set_argument(parser: Any) -> None:
    """The CLIs' repeatable `--set NAME=VALUE` (see `load_config`)."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override one parameter of the params file (dotted name, YAML value), e.g. "
        "--set decoding.strategy=rollouts --set model.device=cuda",
    )


def dump_config(config: PlannerConfig, node_name: str = DEFAULT_NODE_NAME) -> str:
    """The configuration as a ROS 2 params YAML document."""
    doc = {node_name: {"ros__parameters": config_to_params(config)}}
    return yaml.safe_dump(doc, sort_keys=False)


def package_root() -> Path:
    """The folder holding `params/`, `models/`, `launch/`: the source checkout, or the
    installed `share/blockplan` of a colcon/ament install."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "package.xml").is_file() and (parent / "params").is_dir():
            return parent
        share = parent / "share" / "blockplan"
        if (share / "package.xml").is_file():
            return share
    raise ConfigError("cannot locate the blockplan package root (params/, models/)")


def default_params_path() -> Path:
    """The shipped `params/planner.yaml`."""
    return package_root() / "params" / "planner.yaml"
