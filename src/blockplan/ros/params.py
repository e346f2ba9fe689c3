"""The node's ROS 2 parameters, derived from the config tree (pure Python, no rclpy).

Every leaf of `PlannerConfig` is one parameter with its dotted name (`decoding.strategy`), the
ROS type of its annotation, its default, a description (its config class's docstring plus the
allowed values), the choices and range its config field declares (`config.choice`,
`config.bounded`), and `read_only` where a change needs a restart: what the model was built for and what the node is wired to
(`model.*`, `cameras.*`, `frame_window.num_frames`, `topics.*`, `frames.*`). A field marked
`node_parameter=False` (replay's `control.timing`) is no parameter: a params file may set it,
the node ignores it.

Cameras are declared in two steps: `cameras.names` first, then `cameras.<name>.topic` and
`cameras.<name>.transport` for every listed name (`camera_parameter_specs`).

The declared values go back through `config_from_values`, i.e. the same `config_from_params`
mapping `load_config` uses: one validation for the node, the CLI and replay.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from blockplan.config import (
    CHOICES_KEY,
    NODE_KEY,
    RANGE_KEY,
    SIGN_KEY,
    CameraConfig,
    ConfigError,
    PlannerConfig,
    config_from_params,
    config_to_params,
    flatten_params,
    unflatten_params,
)

# Set by planner.launch.py's `model_dir` argument; a non-empty value replaces `model.dir`.
MODEL_DIR_OVERRIDE = "model_dir_override"

# Parameters every rclpy node may receive that are not planner configuration.
NODE_LEVEL_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})
NODE_LEVEL_PREFIXES = ("qos_overrides.",)

READ_ONLY_PREFIXES = ("model.", "cameras.", "topics.", "frames.")
READ_ONLY = frozenset({"frame_window.num_frames", MODEL_DIR_OVERRIDE})

_ROS_TYPES = {bool: "bool", int: "integer", float: "double", str: "string"}


@dataclass(frozen=True)
class ParameterSpec:
    """One parameter as the node declares it. type: bool | integer | double | string |
    string_array | integer_array; `value_range` is inclusive and only set for integer / double."""

    name: str
    type: str
    default: Any
    description: str
    choices: tuple[str, ...] = ()
    value_range: tuple[float, float] | None = None
    read_only: bool = False
    sign: str = ""  # a double's open bound, e.g. "> 0" (`signed` fields of the config)

    @property
    def additional_constraints(self) -> str:
        if self.choices:
            return f"one of {list(self.choices)}"
        return f"a finite number {self.sign}" if self.sign else ""


def _pattern(name: str) -> str:
    """`cameras.front.topic` → `cameras.*.topic` (the per-camera tables share one spec)."""
    parts = name.split(".")
    if parts[0] == "cameras" and len(parts) == 3:
        return f"cameras.*.{parts[2]}"
    return name


def _field(name: str) -> dataclasses.Field | None:
    """The config field behind the parameter `name` (None for `cameras.names`)."""
    parts = name.split(".")
    if parts[0] == "cameras":
        if parts[1:] == ["names"]:
            return None
        owner, leaf = CameraConfig, parts[-1]
    else:
        owner, leaf = typing.get_type_hints(PlannerConfig)[parts[0]], parts[1]
    return next(f for f in dataclasses.fields(owner) if f.name == leaf)


def _metadata(name: str, key: str, default: Any = None) -> Any:
    f = _field(name)
    return default if f is None else f.metadata.get(key, default)


def is_node_parameter(name: str) -> bool:
    """Whether the config setting `name` is a node parameter (see the module docstring)."""
    return bool(_metadata(name, NODE_KEY, True))


def _table(key: str) -> dict[str, Any]:
    """Per parameter pattern (`*` for a camera name), the field metadata under `key`."""
    names = flatten_params(config_to_params(PlannerConfig()))
    table = {_pattern(n): _metadata(n, key) for n in names if is_node_parameter(n)}
    return {pattern: value for pattern, value in table.items() if value is not None}


def _owner_and_hint(name: str) -> tuple[type, Any]:
    """The config class holding the field `name` and the field's annotation."""
    parts = name.split(".")
    if parts[0] == "cameras":
        if parts[1:] == ["names"]:
            return CameraConfig, list[str]
        return CameraConfig, typing.get_type_hints(CameraConfig)[parts[-1]]
    section = typing.get_type_hints(PlannerConfig)[parts[0]]
    return section, typing.get_type_hints(section)[parts[1]]


def _summary(cls: type) -> str:
    doc = " ".join((cls.__doc__ or "").split("\n\n")[0].split())
    return doc


def _spec(name: str, value: Any) -> ParameterSpec:
    owner, hint = _owner_and_hint(name)
    if hint == list[str]:
        ros_type, default = "string_array", list(value)
    elif hint == tuple[int, ...]:
        ros_type, default = "integer_array", [int(v) for v in value]
    elif hint in _ROS_TYPES:
        ros_type, default = _ROS_TYPES[hint], hint(value)
    else:
        raise TypeError(f"parameter {name}: annotation {hint!r} has no ROS parameter type")
    choices = tuple(_metadata(name, CHOICES_KEY, ()))
    value_range = _metadata(name, RANGE_KEY)
    description = f"{name}: {_summary(owner)}"
    if name == "cameras.names":
        description = "cameras.names: the cameras, in the model's view order"
    return ParameterSpec(
        name=name,
        type=ros_type,
        default=default,
        description=description,
        choices=choices,
        value_range=None if value_range is None else tuple(value_range),
        read_only=name.startswith(READ_ONLY_PREFIXES) or name in READ_ONLY,
        sign=_metadata(name, SIGN_KEY, ""),
    )


def parameter_specs(config: PlannerConfig | None = None) -> list[ParameterSpec]:
    """One spec per parameter of `config` (default: the default config), whose values are the
    defaults."""
    flat = flatten_params(config_to_params(config or PlannerConfig()))
    return [_spec(name, value) for name, value in flat.items() if is_node_parameter(name)]


def is_per_camera(name: str) -> bool:
    return name.startswith("cameras.") and name != "cameras.names"


def base_parameter_specs() -> list[ParameterSpec]:
    """What the node declares first: everything but the per-camera tables, plus the launch
    file's model folder override."""
    specs = [s for s in parameter_specs() if not is_per_camera(s.name)]
    override = ParameterSpec(
        name=MODEL_DIR_OVERRIDE,
        type="string",
        default="",
        description=f"{MODEL_DIR_OVERRIDE}: when not empty, the model folder used instead of "
        "model.dir (planner.launch.py's model_dir argument)",
        read_only=True,
    )
    return [*specs, override]


def camera_parameter_specs(names: Sequence[str]) -> list[ParameterSpec]:
    """`cameras.<name>.topic` / `.transport` for the cameras in `cameras.names`, with the
    config's defaults (`/camera/<name>/image_raw`, raw). Raises ConfigError for bad names."""
    config = config_from_params({"cameras": {"names": list(names)}})
    return [s for s in parameter_specs(config) if is_per_camera(s.name)]


def _plain(value: Any) -> Any:
    """rclpy hands arrays back as lists, tuples or array.array: lists for the config."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return value
    return list(value)


def config_from_values(values: Mapping[str, Any]) -> PlannerConfig:
    """The validated config from declared parameter values (dotted names); a non-empty
    `model_dir_override` replaces `model.dir`. Raises ConfigError naming the parameter."""
    planner_values = {
        name: _plain(value)
        for name, value in values.items()
        if name != MODEL_DIR_OVERRIDE and not is_node_level(name)
    }
    nested = unflatten_params(planner_values)
    override = values.get(MODEL_DIR_OVERRIDE) or ""
    if override:
        model = nested.setdefault("model", {})
        if not isinstance(model, dict):
            raise ConfigError(f"model={model!r}: must be a mapping")
        model["dir"] = override
    return config_from_params(nested)


def is_node_level(name: str) -> bool:
    return name in NODE_LEVEL_PARAMETERS or name.startswith(NODE_LEVEL_PREFIXES)


def unknown_parameters(given: Iterable[str], declared: Iterable[str]) -> list[str]:
    """Parameters handed to the node (params file, launch) that it does not declare: typos the
    node would otherwise silently ignore."""
    known = set(declared)
    return sorted(
        n for n in given if n not in known and not is_node_level(n) and not _is_replay_only(n)
    )


def _is_replay_only(name: str) -> bool:
    """A config setting the node does not declare (`node_parameter=False`)."""
    try:
        return not is_node_parameter(name)
    except (KeyError, StopIteration, IndexError):  # not a config field at all: a typo
        return False


def node_topic(topic: str) -> str:
    """The config's absolute topic as the node uses it: relative, so a node namespace
    (`namespace:=car1`) prefixes it; without a namespace the name is unchanged."""
    return topic.lstrip("/")


def camera_subscription(camera: CameraConfig) -> tuple[str, str]:
    """(topic, message type) the node subscribes for a camera: `sensor_msgs/Image` on the
    topic, or for `transport: compressed` `sensor_msgs/CompressedImage` on image_transport's
    `<topic>/compressed` (as replay finds it)."""
    if camera.transport == "compressed":
        topic = (
            camera.topic if camera.topic.endswith("/compressed") else f"{camera.topic}/compressed"
        )
        return node_topic(topic), "sensor_msgs/msg/CompressedImage"
    return node_topic(camera.topic), "sensor_msgs/msg/Image"


# What the config's fields declare, per parameter (`*` stands for a camera name).
CHOICES: dict[str, tuple[str, ...]] = _table(CHOICES_KEY)
RANGES: dict[str, tuple[float, float]] = _table(RANGE_KEY)
