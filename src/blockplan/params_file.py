"""ROS 2 parameter files as ROS reads them: the YAML loader, `ros__parameters` of one node,
and the mapping between nested tables and dotted parameter names (`decoding.strategy`).

Knows nothing of the planner's fields; `blockplan.config` builds and validates the
configuration from what this module reads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from blockplan.errors import ConfigError


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping → ROS 2 dotted parameter names (`decoding.strategy`)."""
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def unflatten_params(flat: Mapping[str, Any]) -> dict[str, Any]:
    """ROS 2 dotted parameter names → nested mapping (the inverse of `flatten_params`)."""
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        node = nested
        *parents, leaf = name.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"parameter {name!r} conflicts with a scalar at {part!r}")
        node[leaf] = value
    return nested


MAX_FLOW_DEPTH = 64  # nested [ / { of one params file (the shipped ones: 1)


class ParamsLoader(yaml.SafeLoader):
    """YAML as ROS 2 reads a params file: `1e3` and `1.0e3` are numbers (PyYAML's YAML 1.1
    wants a sign in the exponent and reads them as strings; rcl's parser takes them as
    doubles), and a key given twice in one mapping is an error instead of the last one
    silently winning."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"the key {key!r} is given twice (lines {seen[key].start_mark.line + 1} "
                    f"and {key_node.start_mark.line + 1}); give each key once",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def fetch_flow_collection_start(self, TokenClass: type) -> None:
        """A `[` or `{`: refused past MAX_FLOW_DEPTH open ones (PyYAML takes minutes over
        a file of 10^5 nested brackets before its composer runs out of recursion)."""
        if self.flow_level >= MAX_FLOW_DEPTH:
            raise yaml.scanner.ScannerError(
                None,
                None,
                f"nested more than {MAX_FLOW_DEPTH} brackets deep",
                self.get_mark(),
            )
        super().fetch_flow_collection_start(TokenClass)  # type: ignore[misc]


ParamsLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _yaml_problem(error: Exception) -> str:
    """A YAML error as one line: the problem and its line (PyYAML's text spans lines)."""
    if isinstance(error, yaml.MarkedYAMLError) and error.problem:
        where = f"line {error.problem_mark.line + 1}: " if error.problem_mark else ""
        return " ".join(f"{where}{error.problem}".split())
    return " ".join(str(error).split())  # one line: PyYAML's text spans several


PLANNER_NODE_NAME = "blockplan_planner"  # the node's name in every launch file
MAX_PARAMS_BYTES = 1 << 20  # the shipped files are a few kB


def load_yaml(text: str) -> Any:
    """One YAML document read with `ParamsLoader` (params files, `--set` values)."""
    return yaml.load(text, Loader=ParamsLoader)  # a SafeLoader: plain data only


def read_params_file(path: str | Path, node_name: str | None = None) -> dict[str, Any]:
    """Read the `ros__parameters` of one node from a ROS 2 parameter YAML file.

    With `node_name=None` the file must hold exactly one node: the planner's
    (`PLANNER_NODE_NAME`) or the `/**` wildcard.
    """
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_PARAMS_BYTES:  # PyYAML reads ~1 MB/s: refuse before reading
            raise ConfigError(
                f"{path}: {size} bytes; a params file is at most {MAX_PARAMS_BYTES} bytes"
            )
        doc = load_yaml(path.read_text(encoding="utf-8"))  # as rcl reads it
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read params file {path}: {_yaml_problem(e)}") from e
    except RecursionError as e:  # PyYAML's composer recurses once per nesting level
        raise ConfigError(f"cannot read params file {path}: nested too deep") from e
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(f"{path}: expected '<node_name>: {{ros__parameters: ...}}' at the top")
    if node_name is None:
        if len(doc) != 1:
            raise ConfigError(f"{path}: holds nodes {sorted(doc)}; name the one to load")
        node_name = next(iter(doc))
        if node_name not in (PLANNER_NODE_NAME, "/**"):
            raise ConfigError(
                f"{path}: holds parameters for node {node_name!r}, but the planner node is "
                f"{PLANNER_NODE_NAME!r}: the node would ignore them (rename the key, use "
                "'/**', or name the node: blockplan config --node NAME)"
            )
    section = doc.get(node_name, doc.get("/**"))
    if not isinstance(section, dict) or "ros__parameters" not in section:
        raise ConfigError(f"{path}: no 'ros__parameters' for node {node_name!r}")
    params = section["ros__parameters"] or {}
    if not isinstance(params, dict):
        raise ConfigError(
            f"{path}: ros__parameters of node {node_name!r} must be a mapping, not "
            f"{type(params).__name__}"
        )
    extra = sorted(set(section) - {"ros__parameters"})
    if extra:
        raise ConfigError(f"{path}: unknown key {extra[0]!r} next to ros__parameters")
    return params
